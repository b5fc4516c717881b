/**
 * A simulated echo path: what a microphone hears of a loudspeaker in a room. The impulse
 * response is a direct path after `delayMs`, then a decaying diffuse tail (seeded noise under an
 * exponential envelope with `decayMs` time constant), scaled so the echo's energy is `gain` times
 * the played signal's. Streaming: `push` convolves chunk by chunk with the same result as one
 * pass, and allocates nothing after construction.
 *
 * Thread contract: one instance per stream, one thread.
 */
import { ArgumentError } from '../errors.js';
import { prng } from '../memory/prng.js';
import { heapWorkspace, type Workspace } from './workspace.js';

export interface EchoPathOptions {
  /** Sample rate of the played and captured signals. */
  rate: number;
  /** Delay of the direct path, 0 to 500 ms. */
  delayMs: number;
  /** Energy gain of the whole path (1 = the echo is as loud as what was played). */
  gain: number;
  /** Time constant of the diffuse tail. Default 8 ms. */
  decayMs?: number;
  /** Length of the tail. Default 40 ms. */
  tailMs?: number;
  /** Seed of the tail's noise. */
  seed?: number;
}

export class EchoPath {
  readonly delay: number;
  /** The response after the delay: [tail] taps, tap 0 the direct path. */
  readonly taps: Float32Array;
  readonly #history: Float32Array; // double-written ring of played samples, [2][span]
  readonly #span: number;
  #pos = 0;

  constructor(o: EchoPathOptions, ws: Workspace = heapWorkspace) {
    if (!(o.rate >= 1000 && o.rate <= 384000)) throw new ArgumentError(`echo path rate must be 1000..384000 Hz, got ${o.rate}`);
    if (!(o.delayMs >= 0 && o.delayMs <= 500)) throw new ArgumentError(`echo path delay must be 0..500 ms, got ${o.delayMs}`);
    if (!(o.gain >= 0 && o.gain <= 16)) throw new ArgumentError(`echo path gain must be 0..16, got ${o.gain}`);
    const decay = ((o.decayMs ?? 8) * o.rate) / 1000;
    const tail = Math.max(1, Math.round(((o.tailMs ?? 40) * o.rate) / 1000));
    this.delay = Math.round((o.delayMs * o.rate) / 1000);
    this.taps = ws('echo.taps', Float32Array, tail);
    const rand = prng(o.seed ?? 1);
    let energy = 0;
    for (let k = 0; k < tail; k++) {
      const v = k === 0 ? 1 : 0.5 * (rand() + rand() + rand() - 1.5) * Math.exp(-k / decay);
      this.taps[k] = v;
      energy += v * v;
    }
    const scale = Math.sqrt(o.gain / energy);
    for (let k = 0; k < tail; k++) this.taps[k] = this.taps[k]! * scale;
    this.#span = this.delay + tail;
    this.#history = ws('echo.history', Float32Array, 2 * this.#span);
  }

  /** Adds the echo of `played[0, n)` to `out[at, at + n)`. */
  push(played: Float32Array, out: Float32Array, at: number, n: number): void {
    const h = this.#history;
    const span = this.#span;
    const taps = this.taps;
    const tail = taps.length;
    for (let i = 0; i < n; i++) {
      const p = this.#pos;
      h[p] = played[i]!;
      h[p + span] = played[i]!;
      this.#pos = p + 1 === span ? 0 : p + 1;
      // Newest sample at p + span; the direct path reads `delay` samples back.
      const base = p + span - this.delay;
      let acc = 0;
      for (let k = 0; k < tail; k++) acc += taps[k]! * h[base - k]!;
      out[at + i] = out[at + i]! + acc;
    }
  }

  reset(): void {
    this.#history.fill(0);
    this.#pos = 0;
  }
}
