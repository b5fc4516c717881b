// The self-conversation the gate tests run: two conversations of one engine on a pair of
// loopback devices, A opened by hello.wav, each then hearing only the other (and its own echo).
import { fileURLToPath } from 'node:url';
import { readWavSamples } from '../helpers.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { LoopbackDevice } from '../../src/devices.js';
import { resampleSignal } from '../../src/dsp/resample.js';

export const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const RATE = 48000;

export interface SelfRun {
  played: [Buffer, Buffer];
  events: string[];
  replies: number;
  bargeIns: number;
  underruns: number;
  /** Device seconds, and wall seconds the lockstep took. */
  seconds: number;
  wallSeconds: number;
  allocations: string[];
  back: boolean;
}

/** Runs until `exchanges` replies and nobody speaking, or `seconds` of device time; `gain` 0 cuts the line between the rooms. */
export async function selfTalk(model: string, o: { exchanges: number; gain: number; replySeconds: number; seconds?: number }): Promise<SelfRun> {
  const hello = readWavSamples(fixture);
  const opener = new Float32Array(RATE + Math.round((hello.samples.length * RATE) / hello.rate));
  opener.set(resampleSignal(hello.samples, hello.rate, RATE), RATE);
  const engine = await loadWithHooks(model, { replySeconds: o.replySeconds, capacity: 2 }, { trapAllocations: true });
  try {
    const base = engine.snapshot().held.total;
    const [da, db] = LoopbackDevice.pair(
      { rate: RATE, echo: { delayMs: 60, gain: 0.5, seed: 4 }, user: opener },
      { rate: RATE, echo: { delayMs: 40, gain: 0.5, seed: 5 } },
      o.gain,
    );
    const a = await engine.open({ inputRate: RATE, seed: 5, vad: true, echoDelayMs: 60 });
    const b = await engine.open({ inputRate: RATE, seed: 6, vad: true, echoDelayMs: 40 });
    const played: [Float32Array[], Float32Array[]] = [[], []];
    for (const [k, d] of [da, db].entries()) {
      const tick = d.tick.bind(d);
      d.tick = (out, mic, far) => {
        played[k]!.push(out.slice());
        tick(out, mic, far);
      };
    }
    const events: string[] = [];
    let replies = 0;
    let bargeIns = 0;
    let speaking = 0;
    for (const [name, c, d] of [
      ['A', a, da],
      ['B', b, db],
    ] as const) {
      c.on('speech_start', (e) => {
        speaking++;
        events.push(`${name} hears ${e.turn} @${d.clock}`);
      });
      c.on('speech_end', (e) => {
        speaking--;
        events.push(`${name} heard ${e.turn} ${e.reason} @${d.clock}`);
      });
      c.on('barge_in', (e) => {
        bargeIns++;
        events.push(`${name} interrupted ${e.turn} @${d.clock}`);
      });
      c.on('turn_end', (e) => {
        replies++;
        events.push(`${name} replied ${e.turn} ${e.stop} ${e.frames} @${d.clock}`);
      });
    }
    const t0 = performance.now();
    const links = await engine.runTogether(
      [
        { conversation: a, device: da },
        { conversation: b, device: db },
      ],
      { seconds: o.seconds ?? 60, until: () => replies >= o.exchanges && speaking === 0 },
    );
    const wallSeconds = (performance.now() - t0) / 1000;
    // What happens once the devices stop (the stages finish a reply on their own) is not lockstep.
    const seen = events.slice();
    const counted = { replies, bargeIns };
    const allocations = (await engine.pipeline.stats()).filter((s) => s.allocationsAfterReady !== 0).map((s) => `${s.stage} ${s.allocationsAfterReady}`);
    await a.close();
    await b.close();
    const bytes = (p: Float32Array[]): Buffer => Buffer.concat(p.map((x) => Buffer.from(x.buffer)));
    return {
      played: [bytes(played[0]), bytes(played[1])],
      events: seen,
      ...counted,
      underruns: links[0]!.underruns + links[1]!.underruns,
      seconds: da.clock / RATE,
      wallSeconds,
      allocations,
      back: engine.snapshot().held.total === base,
    };
  } finally {
    await engine.close();
  }
}
