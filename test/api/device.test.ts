// Conversations on a duplex device through the five-stage pipeline: the loopback device (a
// simulated echo path and a scripted user, in lockstep with the stages), on the built artifact.
import t from 'tap';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { readWavSamples, scratchDir } from '../helpers.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { LoopbackDevice } from '../../src/devices.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { resampleSignal } from '../../src/dsp/resample.js';

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-device-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const RATE = 48000;
const hello = readWavSamples(fixture);
const utterance = resampleSignal(hello.samples, hello.rate, RATE);
const skip = apmAvailable() ? false : 'no WebRTC audio processing';

/** The user: a question, a pause while the reply plays, the same words over the reply, silence. */
function script(): { user: Float32Array; second: number } {
  const parts = [new Float32Array(RATE), utterance, new Float32Array(Math.round(5.5 * RATE)), utterance, new Float32Array(4 * RATE)];
  const user = new Float32Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  let second = 0;
  for (const [k, p] of parts.entries()) {
    if (k === 3) second = at;
    user.set(p, at);
    at += p.length;
  }
  // Its onset: the first sample of the second utterance above -40 dBFS.
  let onset = second;
  while (Math.abs(user[onset]!) < 0.01) onset++;
  return { user, second: onset };
}

/** One scripted conversation on a fresh engine: what the device played, and what happened when (device clock). */
async function session(): Promise<{ played: Buffer; events: string[]; stopAt: number; onset: number; link: { overruns: number } }> {
  const { user, second } = script();
  const engine = await loadWithHooks(model, { replySeconds: 8 }, { trapAllocations: true });
  try {
    const device = new LoopbackDevice({ rate: RATE, echo: { delayMs: 60, gain: 0.5, seed: 4 }, user });
    const conv = await engine.open({ inputRate: RATE, seed: 5, vad: true, echoDelayMs: 60 });
    const played: Float32Array[] = [];
    const tick = device.tick.bind(device);
    device.tick = (out, mic, far) => {
      played.push(out.slice());
      tick(out, mic, far);
    };
    const events: string[] = [];
    conv.on('speech_start', (e) => events.push(`speech_start ${e.turn} @${device.clock}`));
    conv.on('speech_end', (e) => events.push(`speech_end ${e.turn} ${e.reason} @${device.clock}`));
    conv.on('barge_in', (e) => events.push(`barge_in ${e.turn} heard ${e.heardFrames} @${device.clock}`));
    conv.on('turn_end', (e) => events.push(`turn_end ${e.turn} ${e.stop} ${e.frames} @${device.clock}`));
    let replies = 0;
    conv.on('turn_end', () => replies++);
    // The script, then until the second reply has played.
    const link = await conv.run(device, { seconds: user.length / RATE + 20, until: () => replies === 2 });
    const stats = await engine.pipeline.stats();
    for (const s of stats) if (s.allocationsAfterReady !== 0) events.push(`${s.stage} allocated ${s.allocationsAfterReady}`);
    await conv.close();
    const all = new Float32Array(played.length * device.period);
    for (const [k, p] of played.entries()) all.set(p, k * device.period);
    // Playback stopped: the first sample after the onset from which the output stays silent.
    let k = second;
    for (; k < all.length; k++) {
      let silent = true;
      for (let j = k; j < Math.min(all.length, k + RATE / 10); j++) if (all[j] !== 0) silent = false;
      if (silent) break;
    }
    return { played: Buffer.from(all.buffer), events, stopAt: k, onset: second, link };
  } finally {
    await engine.close();
  }
}

t.test(
  'a duplex conversation on the loopback device: echo cancelled, the user interrupts, playback stops fast, repeatable byte for byte',
  { skip },
  async (t) => {
    const a = await session();
    const starts = a.events.filter((e) => e.startsWith('speech_start'));
    t.equal(starts.length, 2, `two speech onsets, none from the echo (${a.events.join(', ')})`);
    const expected: [string, string][] = [
      ['barge_in 0 heard', 'the second utterance interrupted the first reply'],
      ['turn_end 0 interrupted', 'the first reply ended interrupted'],
      ['turn_end 1', 'the second turn was answered'],
    ];
    for (const [event, what] of expected)
      t.ok(
        a.events.some((e) => e.startsWith(event)),
        what,
      );
    t.notOk(
      a.events.some((e) => e.includes('allocated')),
      'no stage allocated after readiness',
    );
    t.equal(a.link.overruns, 0, 'no microphone period was lost');
    const ms = ((a.stopAt - a.onset) * 1000) / RATE;
    t.ok(ms >= 0 && ms <= 200, `playback went silent ${ms.toFixed(1)} ms (device clock) after the speech onset`);
    const b = await session();
    t.ok(a.played.equals(b.played), `the same ${a.played.length} bytes played`);
    t.same(b.events, a.events, 'the same events at the same device times');
  },
);
