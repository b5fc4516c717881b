// The duplex session's listening path with V8's inlining turned off (system tier: a slow run of
// its own process), where an allocation the optimiser would have removed shows.
import t from 'tap';
import { apmAvailable } from '../../src/dsp/aec.js';
import { corpusTools } from '../../bench/corpus.js';
import { runScript } from '../helpers.js';

const skip = apmAvailable() && corpusTools() ? false : 'needs WebRTC audio processing, espeak-ng and sox';

t.test('duplex session: listening allocates nothing even where V8 inlines nothing, with either VAD', { skip }, async (t) => {
  const got = runScript<Record<string, { heap: number; arrayBuffers: number; windows: number }>>(new URL('./workers/session-probe.js', import.meta.url), [
    '--max-inlined-bytecode-size=0',
  ]);
  for (const [vad, p] of Object.entries(got)) {
    t.equal(p.arrayBuffers, 0, `${vad}: no ArrayBuffer`);
    t.ok(p.heap < 1024, `${vad}: JS heap growth ${p.heap} bytes over 200 periods (window ${p.windows})`);
  }
});
