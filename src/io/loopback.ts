/**
 * An in-process duplex device for tests and demos: whatever is played comes back into the
 * microphone through a simulated echo path (dsp/echo.ts), added to a scripted user signal, on a
 * simulated device clock. A period at a time, and deterministic, so full-duplex scenarios run
 * faster than real time and give the same bytes every run.
 *
 * The far-end reference a duplex device hands to echo cancellation is what it played in the
 * same period the microphone samples were captured (device-clock alignment); `latencyMs` is the
 * delay the device reports between the two (the echo path's own delay, as a real device reports
 * its output and input latency).
 *
 * Two devices can face each other (`LoopbackDevice.pair`): each one's speaker is also heard by
 * the other's microphone, a period later, so two conversations talk through audio alone.
 *
 * Thread contract: one thread; `tick` allocates nothing.
 */
import { ArgumentError } from '../errors.js';
import { EchoPath, type EchoPathOptions } from '../dsp/echo.js';

export interface LoopbackOptions {
  /** Device sample rate. */
  rate: number;
  /** Samples per period. Default 10 ms. */
  period?: number;
  /** The room between speaker and microphone; null for none. */
  echo: Omit<EchoPathOptions, 'rate'> | null;
  /** The user's voice (and any noise) at the device rate, from clock 0; silence after it. */
  user?: Float32Array;
}

export class LoopbackDevice {
  readonly rate: number;
  readonly period: number;
  /** The device clock: samples captured (and played) so far. */
  clock = 0;
  /** The delay the device reports between a played sample and its echo, ms. */
  readonly latencyMs: number;
  /** What the last period played. */
  readonly lastPlayed: Float32Array;
  readonly #echo: EchoPath | null;
  readonly #user: Float32Array;
  /** What this device played in the last two periods, [2][period] by period parity (a pair's line). */
  readonly #sent: Float32Array;
  #peer: LoopbackDevice | null = null;
  #peerGain = 0;

  constructor(o: LoopbackOptions) {
    if (!Number.isInteger(o.rate) || o.rate < 8000 || o.rate > 384000) throw new ArgumentError(`loopback rate must be 8000..384000 Hz, got ${o.rate}`);
    this.rate = o.rate;
    this.period = o.period ?? Math.round(o.rate / 100);
    if (!Number.isInteger(this.period) || this.period < 1 || this.period > o.rate)
      throw new ArgumentError(`loopback period must be 1..${o.rate} samples, got ${this.period}`);
    this.#echo = o.echo === null ? null : new EchoPath({ ...o.echo, rate: o.rate });
    this.latencyMs = o.echo === null ? 0 : o.echo.delayMs;
    this.#user = o.user ?? new Float32Array(0);
    this.lastPlayed = new Float32Array(this.period);
    this.#sent = new Float32Array(2 * this.period);
  }

  /**
   * Two devices in one room: what each plays reaches the other's microphone one period later at
   * `gain`, beside its own echo and user. Their ticks alternate, a period each, on the same clock.
   */
  static pair(a: LoopbackOptions, b: LoopbackOptions, gain = 1): [LoopbackDevice, LoopbackDevice] {
    if (!(gain >= 0 && gain <= 16)) throw new ArgumentError(`loopback pair gain must be 0..16, got ${gain}`);
    const da = new LoopbackDevice(a);
    const db = new LoopbackDevice(b);
    if (da.rate !== db.rate || da.period !== db.period)
      throw new ArgumentError(`a loopback pair runs at one rate and period, got ${da.rate}/${da.period} and ${db.rate}/${db.period}`);
    da.#peer = db;
    db.#peer = da;
    da.#peerGain = gain;
    db.#peerGain = gain;
    return [da, db];
  }

  /**
   * One period: `played[0, period)` goes to the speaker; the microphone's samples for the same
   * period are written to `mic`, and what was played (the far-end reference) to `far`.
   */
  tick(played: Float32Array, mic: Float32Array, far: Float32Array): void {
    const n = this.period;
    const u = this.#user;
    const q = this.clock / n;
    const sent = this.#sent;
    const to = (q % 2) * n;
    for (let i = 0; i < n; i++) {
      const k = this.clock + i;
      mic[i] = k < u.length ? u[k]! : 0;
      far[i] = played[i]!;
      this.lastPlayed[i] = played[i]!;
      sent[to + i] = played[i]!;
    }
    const peer = this.#peer;
    if (peer !== null) {
      // The peer's previous period, whichever of the two ticks first in this one.
      if (peer.clock !== this.clock && peer.clock !== this.clock + n)
        throw new ArgumentError(`a loopback pair ticks in turn: this device is at ${this.clock}, its peer at ${peer.clock}`);
      if (q > 0) {
        const from = ((q + 1) % 2) * n;
        const g = this.#peerGain;
        for (let i = 0; i < n; i++) mic[i] = mic[i]! + g * peer.#sent[from + i]!;
      }
    }
    this.#echo?.push(played, mic, 0, n);
    this.clock += n;
  }
}
