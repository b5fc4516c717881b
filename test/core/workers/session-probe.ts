// An idle duplex session's tick under the allocation probe, with each VAD, printed as JSON.
// The test runs this where V8 inlines nothing, so a double that crosses a call boundary in
// the listening path shows up as allocation.
import { MemoryDomain } from '../../../src/memory/index.js';
import { makeCheckpoint } from '../../../src/io/checkpoint.js';
import { SpeechModel } from '../../../src/core/conversation.js';
import { DuplexSession } from '../../../src/core/session.js';
import { LoopbackDevice } from '../../../src/io/loopback.js';
import { allocationProbe, scratchDir } from '../../helpers.js';

const RATE = 48000;
const dir = scratchDir('voxslab-session-probe-');
makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });
const quiet = new Float32Array(RATE * 300);
for (let i = 0; i < quiet.length; i++) quiet[i] = 0.001 * Math.sin(i * 0.37);
const out: Record<string, ReturnType<typeof allocationProbe>> = {};
for (const vad of ['silero', 'low'] as const) {
  const domain = MemoryDomain.create({ limit: '2GiB' });
  const model = SpeechModel.load(dir, domain, { outputRate: RATE });
  const conv = model.conversation({ seed: 7, inputRate: 16000, checkpoints: DuplexSession.checkpointsFor(model) });
  model.ready();
  conv.ready();
  const session = new DuplexSession(conv, new LoopbackDevice({ rate: RATE, echo: { delayMs: 40, gain: 0.5 }, user: quiet }), { vad });
  out[vad] = allocationProbe(200, () => session.tick());
  session.close();
}
console.log(JSON.stringify(out));
