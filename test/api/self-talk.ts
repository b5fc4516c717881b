// The self-conversation the gate tests run (src/cli/self-talk.ts, as `talk --self` runs it),
// with what each side played, its events and the stages' allocations, A opened by hello.wav.
import { fileURLToPath } from 'node:url';
import { readWavSamples } from '../helpers.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { resampleSignal } from '../../src/dsp/resample.js';
import { selfConversation } from '../../src/cli/self-talk.js';

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
    const played: [Float32Array[], Float32Array[]] = [[], []];
    const events: string[] = [];
    const t0 = performance.now();
    const r = await selfConversation(engine, {
      rate: RATE,
      opener,
      seed: 5,
      exchanges: o.exchanges,
      seconds: o.seconds ?? 60,
      gain: o.gain,
      played: (k, out) => played[k]!.push(out.slice()),
      event: (e) =>
        events.push(`${e.side} ${e.kind} ${e.turn}${e.detail === undefined ? '' : ` ${e.detail}`}${e.frames === undefined ? '' : ` ${e.frames}`} @${e.clock}`),
    });
    const wallSeconds = (performance.now() - t0) / 1000;
    // What happens once the devices stop (the stages finish a reply on their own) is not lockstep.
    const seen = events.slice();
    const allocations = (await engine.pipeline.stats()).filter((s) => s.allocationsAfterReady !== 0).map((s) => `${s.stage} ${s.allocationsAfterReady}`);
    for (const c of r.conversations) await c.close();
    const bytes = (p: Float32Array[]): Buffer => Buffer.concat(p.map((x) => Buffer.from(x.buffer)));
    return {
      played: [bytes(played[0]), bytes(played[1])],
      events: seen,
      replies: r.replies,
      bargeIns: r.bargeIns,
      underruns: r.underruns,
      seconds: r.seconds,
      wallSeconds,
      allocations,
      back: engine.snapshot().held.total === base,
    };
  } finally {
    await engine.close();
  }
}
