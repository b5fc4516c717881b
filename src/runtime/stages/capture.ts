import { BadInputError, InternalError } from '../../errors.js';
import { arenaWorkspace } from '../../dsp/workspace.js';
import { Resampler } from '../../dsp/resample.js';
import { capacity, NONE, SIZING_ENGINE, StreamStage, type Environment, type RoomConv } from './stage.js';
import { AUDIO_CATEGORIES, stageDefaults, type StageSpec } from '../topology.js';
import { captureMirrored, maxPayloadOf, RECORD_OVERHEAD } from '../ring.js';
import { REC_PCM, REC_PCM_ECHO, type StageConversation, type StageOpen } from '../protocol.js';
import { APM_HEAP_BOUND, EchoCanceller } from '../../dsp/aec.js';
import { native } from '../../native.js';

import '../../core/categories.js';

/** Most device-rate samples in one input record. */
const INPUT_CHUNK_MAX = 4096;

/** Samples per input record (the capture stage's unit), by input rate: about 64 ms of 16 kHz output. */
export function inputChunk(inputRate: number): number {
  return Math.max(1, Math.min(INPUT_CHUNK_MAX, Math.floor((1024 * inputRate) / 16000)));
}

/** Most 16 kHz samples in one capture record (the frontend sizes its VAD mode by it). */
export const CAPTURE_RECORD_MAX = 4096;

/** Words of the capture ring: four of the largest input records. */
const CAPTURE_RING_WORDS = 4 * (INPUT_CHUNK_MAX + RECORD_OVERHEAD) + 4;

/** `words` rounded up to whole pages of this machine. */
function pageWords(words: number): number {
  const page = native.pageSize() / 4;
  return Math.ceil(words / page) * page;
}

/** Data words of each ring of a conversation, from the configuration and options. */

interface CaptureConv extends RoomConv {
  resampler: Resampler;
  buf: Float32Array; // one input record ([2][chunk] for a DUPLEX record)
  res: Float32Array; // its 16 kHz samples, or the segment's tail
  /** Echo cancellation (null: none): the far end's resampler, its 16 kHz samples, the cleaned ones. */
  aec: EchoCanceller | null;
  farResampler: Resampler | null;
  farIn: Float32Array; // the far half of a DUPLEX record
  far: Float32Array;
  clean: Float32Array;
}

export class CaptureStage extends StreamStage<CaptureConv> {
  constructor(env: Environment) {
    super('capture', env);
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const chunk = inputChunk(o.inputRate);
    const rate = this.config.frontend.sampleRate;
    const echo = o.echoDelayMs >= 0;
    const options = { delayMs: o.echoDelayMs };
    const engine = echo
      ? this.holdNative(
          o.index,
          APM_HEAP_BOUND.echo,
          () => EchoCanceller.engine(options),
          (e) => native.apmDestroy(e.handle),
        )
      : null;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} capture` }], 1 << 24, ([a]) => {
      this.clocksFor(o.index, a!);
      const resampler = new Resampler(o.inputRate, rate, {}, arenaWorkspace(a!, 'workspace.frontend', 'capture'));
      const res = a!.carve('capture.resampled', 'workspace.frontend', Float32Array, resampler.maxOutput(chunk) + resampler.taps + 2);
      const buf = a!.carve('capture.input', 'workspace.frontend', Float32Array, echo ? 2 * chunk : chunk);
      const plain = { room: res.length + 2 * RECORD_OVERHEAD, resampler, buf, res, aec: null, farResampler: null, farIn: NONE, far: NONE, clean: NONE };
      if (!echo) return plain;
      const aec = new EchoCanceller(options, arenaWorkspace(a!, 'capture', 'capture.echo'), engine ?? SIZING_ENGINE);
      const farResampler = new Resampler(o.inputRate, rate, {}, arenaWorkspace(a!, 'capture', 'capture.far'));
      const farIn = a!.carve('capture.far_in', 'capture', Float32Array, chunk);
      const far = a!.carve('capture.far', 'capture', Float32Array, res.length);
      const clean = a!.carve('capture.clean', 'capture', Float32Array, aec.maxOutput(res.length));
      return { ...plain, room: Math.max(res.length, clean.length) + 2 * RECORD_OVERHEAD, aec, farResampler, farIn, far, clean };
    });
    if (conv.res.length > CAPTURE_RECORD_MAX)
      throw new InternalError(`capture: a record at ${o.inputRate} Hz would hold ${conv.res.length} samples, more than ${CAPTURE_RECORD_MAX}`);
    if (conv.res.length > maxPayloadOf(capacity(o, 'pcm16')))
      throw new BadInputError({ field: 'inputRate' }, `the capture ring cannot hold a record at ${o.inputRate} Hz`);
    this.conversations[o.index] = { index: o.index, input: this.input(o, 'input'), out: this.output(o, 'pcm16'), ...conv };
  }

  protected pcm(c: CaptureConv): void {
    const n = c.input.read(c.buf, 0);
    this.#finite(c.buf, n);
    if (c.aec !== null) {
      // Microphone alone in an echo-cancelled conversation: the far end was silent.
      c.farIn.fill(0, 0, n);
      this.#cancel(c, c.aec, n);
      return;
    }
    const m = c.resampler.push(c.buf, c.res, 0, n);
    if (m > 0) c.out.write(REC_PCM, c.res, 0, m);
  }

  /** `c.buf[0, n)` heard, `c.farIn[0, n)` played: both to 16 kHz, the echo cancelled, sent on. */
  #cancel(c: CaptureConv, aec: EchoCanceller, n: number): void {
    const m = c.resampler.push(c.buf, c.res, 0, n);
    c.farResampler!.push(c.farIn, c.far, 0, n);
    const w = aec.push(c.res, 0, c.far, 0, m, c.clean, 0);
    if (w > 0) c.out.write(aec.converged || !aec.farActive ? REC_PCM : REC_PCM_ECHO, c.clean, 0, w);
  }

  #finite(x: Float32Array, n: number): void {
    for (let i = 0; i < n; i++) {
      if (!Number.isFinite(x[i]!)) {
        x[i] = 0;
        this.nonFinite++;
      }
    }
  }

  /**
   * A DUPLEX record: both halves to 16 kHz (the same resampling, so the same counts), the echo
   * of the far end cancelled from the microphone. Until the canceller has converged, what it
   * hears while the far end plays goes out as PCM_ECHO: the frontend does not take it for the user.
   */
  protected override duplex(c: CaptureConv): void {
    const aec = c.aec;
    if (aec === null) {
      c.input.skip();
      return;
    }
    const n = c.input.read(c.buf, 0) >> 1;
    this.#finite(c.buf, 2 * n);
    native.copyF32(c.buf, n, c.farIn, 0, n);
    this.#cancel(c, aec, n);
  }

  protected endSegment(c: CaptureConv): boolean {
    const m = c.resampler.finish(c.res, 0);
    if (m > 0) c.out.write(REC_PCM, c.res, 0, m);
    c.resampler.reset();
    return true;
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'capture', (env) => new CaptureStage(env)),
  // The capture ring's data is whole pages when it is a mirrored mapping (carve.ts).
  capacities: { input: () => (captureMirrored() ? pageWords(CAPTURE_RING_WORDS) : CAPTURE_RING_WORDS), pcm16: () => 16384 },
  ...{ reads: ['input'], writes: ['pcm16'], clocks: ['frontend'], categories: AUDIO_CATEGORIES },
};
