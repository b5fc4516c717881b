// The one-thread duplex session's long runs (system tier): five minutes of the assistant's own
// voice heard back, and the listening path with V8's inlining turned off, where an allocation
// the optimiser would have removed shows.
import t from 'tap';
import { apmAvailable } from '../../src/dsp/aec.js';
import { assistantVoice, corpusTools } from '../../bench/corpus.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { SpeechModel, type Conversation } from '../../src/core/conversation.js';
import { DuplexSession } from '../../src/core/session.js';
import { LoopbackDevice } from '../../src/io/loopback.js';
import { runScript, scratchDir } from '../helpers.js';

const skip = apmAvailable() && corpusTools() ? false : 'needs WebRTC audio processing, espeak-ng and sox';
const dir = skip === false ? scratchDir('voxslab-session-long-') : '';
if (skip === false) makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });

/** A ready duplex conversation of the tiny model speaking at `rate`. */
function ready(rate: number): { conv: Conversation } {
  const model = SpeechModel.load(dir, MemoryDomain.create({ limit: '2GiB' }), { outputRate: rate });
  const conv = model.conversation({ seed: 7, inputRate: 16000, checkpoints: DuplexSession.checkpointsFor(model) });
  model.ready();
  conv.ready();
  return { conv };
}

/** The assistant's speech at 16 kHz. */
const assistantSpeech = (seconds: number): Float32Array => assistantVoice(seconds);

t.test('duplex session: listening allocates nothing even where V8 inlines nothing, with either VAD', { skip }, async (t) => {
  const got = runScript<Record<string, { heap: number; arrayBuffers: number; windows: number }>>(new URL('./workers/session-probe.js', import.meta.url), [
    '--max-inlined-bytecode-size=0',
  ]);
  for (const [vad, p] of Object.entries(got)) {
    t.equal(p.arrayBuffers, 0, `${vad}: no ArrayBuffer`);
    t.ok(p.heap < 1024, `${vad}: JS heap growth ${p.heap} bytes over 200 periods (window ${p.windows})`);
  }
});

t.test('duplex session: no false barge-in in 5 minutes of assistant speech with its echo at equal level', { skip }, async (t) => {
  // At 16 kHz (the simulated room costs a convolution per sample).
  const rate = 16000;
  const { conv } = ready(rate);
  let falseStarts = 0;
  for (const [delayMs, seconds] of [
    [120, 300],
    [30, 60],
  ] as const) {
    const speech = assistantSpeech(seconds);
    // Equal level: the echo path's energy gain is 1. A quiet room: noise 60 dB under full scale.
    const room = new Float32Array(speech.length);
    let s = 1;
    for (let i = 0; i < room.length; i++) {
      s = (s * 1103515245 + 12345) >>> 0;
      room[i] = 0.002 * (s / 4294967296 - 0.5);
    }
    const device = new LoopbackDevice({ rate, echo: { delayMs, gain: 1, seed: 4 }, user: room });
    const session = new DuplexSession(conv, device);
    session.say(speech);
    while (device.clock + device.period <= speech.length) session.tick();
    t.comment(
      `${seconds} s, echo at ${delayMs} ms: ${session.bargeIns} barge-ins, ${session.pauses} pauses that resumed, ${session.aec.gated} of ` +
        `${session.aec.frames} frames gated`,
    );
    falseStarts += session.bargeIns + session.turns;
    session.close();
  }
  t.equal(falseStarts, 0, 'no barge-in and no user turn from the echo alone');
});
