/**
 * A duplex device on PortAudio driven from the addon (native/src/audio.cc): PortAudio's own
 * callback thread copies each period's microphone samples (channel 0) into a ring in a
 * SharedArrayBuffer and plays the next samples of an output ring on every channel. Nothing in
 * that path runs JS or allocates; this thread is woken once per callback (one wake queued at
 * most) and takes whole periods out of the ring, as `PortAudioDevice` does with naudiodon's
 * chunks, without a Buffer per chunk.
 *
 * Thread contract: the thread that opened it (its wake-ups arrive there). `tick` allocates nothing.
 */
import { DeviceError } from '../errors.js';
import { native } from '../native.js';
import type { AudioDevice, PortAudioOptions } from './device-types.js';

const W = native.audioWords;
/** Output periods queued ahead of the device: silence at start, then the session's. */
const PRIME = 2;

/** The smallest power of two at least `n`. */
function pow2(n: number): number {
  let p = 2;
  while (p < n) p *= 2;
  return p;
}

export class NativeAudioDevice {
  readonly library = 'portaudio';
  readonly rate: number;
  readonly period: number;
  readonly latencyMs: number;
  readonly input: AudioDevice;
  readonly output: AudioDevice;
  clock = 0;
  /** No Buffers are handed out on this path (PortAudioDevice counts naudiodon's). */
  readonly libraryBuffers = 0;
  readonly libraryBytes = 0;
  /** Periods written while the output ring was full (the device fell behind); they were dropped. */
  queued = 0;
  closeRequests = 0;
  failure: DeviceError | null = null;
  /** The control words, the microphone ring and the output ring the callback shares. */
  readonly control: Int32Array;
  readonly #mic: Float32Array;
  readonly #out: Float32Array;
  readonly #handle: number;
  readonly #label: string;
  #onPeriod: (() => void) | null = null;
  #stopped = false;
  #closed = false;

  constructor(o: PortAudioOptions) {
    this.rate = o.rate;
    this.period = o.period ?? Math.round(o.rate / 100);
    this.input = o.input;
    this.output = o.output;
    this.#label = `${o.input.name} / ${o.output.name}`;
    this.latencyMs = o.input.inputLatencyMs + o.output.outputLatencyMs + (PRIME * 1000 * this.period) / o.rate;
    this.control = new Int32Array(new SharedArrayBuffer(4 * W.count));
    this.#mic = new Float32Array(new SharedArrayBuffer(4 * pow2(Math.ceil((o.bufferSeconds ?? 2) * o.rate))));
    this.#out = new Float32Array(new SharedArrayBuffer(4 * pow2(8 * this.period)));
    // Mono where the devices take it; stereo where they insist.
    let failure: unknown = null;
    let handle = -1;
    for (const channels of [1, 2]) {
      if (o.input.inputs < channels || o.output.outputs < channels) continue;
      try {
        handle = native.audioOpen(o.input.id, o.output.id, o.rate, channels, channels, this.period, this.control, this.#mic, this.#out, () => this.#wake());
        break;
      } catch (cause) {
        failure = cause;
      }
    }
    if (handle < 0) {
      const why = failure instanceof Error ? failure.message : String(failure ?? 'no channel count both devices have');
      throw new DeviceError(this.#label, `could not open at ${o.rate} Hz (busy, or the rate is not supported): ${why}`, { cause: failure });
    }
    this.#handle = handle;
  }

  /** Microphone samples the callback dropped because the ring was full (the session fell behind). */
  get overruns(): number {
    return Atomics.load(this.control, W.overruns);
  }

  /** Callbacks that found less output than the device asked for (it played silence for the rest). */
  get deviceUnderruns(): number {
    return Atomics.load(this.control, W.underruns);
  }

  /** Input samples waiting. */
  get available(): number {
    return (Atomics.load(this.control, W.micWrite) - Atomics.load(this.control, W.micRead)) >>> 0;
  }

  /** Starts the stream; `onPeriod` runs on this thread whenever a period of input is in. */
  start(onPeriod: () => void): void {
    this.#onPeriod = onPeriod;
    // Silent periods prime the output, so the first callbacks have something to play.
    this.#out.fill(0, 0, PRIME * this.period);
    Atomics.store(this.control, W.outWrite, PRIME * this.period);
    try {
      native.audioStart(this.#handle);
    } catch (cause) {
      this.#fail(new DeviceError(this.#label, `could not start: ${(cause as Error).message}`, { cause }));
    }
  }

  #wake(): void {
    Atomics.store(this.control, W.pending, 0);
    if (this.#stopped) return;
    if (Atomics.load(this.control, W.finished) === 1) {
      this.#fail(new DeviceError(this.#label, 'stopped: the audio stream ended (the device went away)'));
      return;
    }
    // The periods in now: the ring fills while they run, and the rest wait for the next wake
    // (one is queued by then), so timers and promises get their turn between.
    for (let k = Math.floor(this.available / this.period); k > 0 && !this.#stopped; k--) this.#onPeriod?.();
  }

  #fail(e: DeviceError): void {
    if (this.failure === null) this.failure = e;
    this.#onPeriod?.();
  }

  /** One period: the next input period into `mic`, `played` out to the device and into `far`. */
  tick(played: Float32Array, mic: Float32Array, far: Float32Array): void {
    const n = this.period;
    const c = this.control;
    const ring = this.#mic;
    const mask = ring.length - 1;
    let r = Atomics.load(c, W.micRead);
    const have = (Atomics.load(c, W.micWrite) - r) >>> 0;
    for (let i = 0; i < n; i++) {
      if (i < have) {
        mic[i] = ring[r & mask]!;
        r = (r + 1) | 0;
      } else mic[i] = 0;
      far[i] = played[i]!;
    }
    Atomics.store(c, W.micRead, r);
    const out = this.#out;
    const omask = out.length - 1;
    const w = Atomics.load(c, W.outWrite);
    if (((w - Atomics.load(c, W.outRead)) >>> 0) + n > out.length) this.queued++;
    else {
      for (let i = 0; i < n; i++) out[(w + i) & omask] = played[i]!;
      Atomics.store(c, W.outWrite, (w + n) | 0);
    }
    this.clock += n;
  }

  /** Stops the stream; PortAudio has closed it when this resolves. */
  stop(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#stopped = true;
    this.#closed = true;
    this.#onPeriod = null;
    this.closeRequests++;
    try {
      native.audioClose(this.#handle);
    } catch (cause) {
      return Promise.reject(new DeviceError(this.#label, (cause as Error).message, { cause }));
    }
    return Promise.resolve();
  }
}
