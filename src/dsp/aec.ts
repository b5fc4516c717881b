/**
 * WebRTC's audio processing module over any chunking of 16 kHz PCM: echo cancellation with the
 * far-end reference, high-pass and noise suppression (`EchoCanceller`), or voice activity alone
 * (`VoiceDetector`). The engine takes 10 ms frames; both classes gather samples into one frame
 * and hand out whole frames, so streaming equals one pass whatever the chunk sizes.
 *
 * The engine's own memory comes from the C heap when it is created (measured, `heapBytes`, for
 * the manifest); processing afterwards does not grow it. Where the addon was built without the
 * engine, `apmAvailable()` is false and constructors throw a clear error.
 *
 * Thread contract: one instance per stream, one thread; `push` neither allocates nor throws.
 */
import { ArgumentError, InternalError, UnsupportedError } from '../errors.js';
import { native, type ApmHandle } from '../native.js';
import { defaultOf } from '../options.js';
import { heapWorkspace, type Workspace } from './workspace.js';

/** Samples per engine frame (10 ms at 16 kHz). */
export const APM_FRAME = 160;
export const APM_RATE = 16000;
export const APM_VOICE = 1;
export const APM_ECHO = 2;
/** Far-end frames (10 ms) before the canceller counts as converged: its first seconds misfire. */
const CONVERGE_FRAMES = 300;
/**
 * The residual echo gate's default, dB. Converged, the canceller takes 60 dB and more out of
 * echo alone, and far less out of a frame with the user in it, except where its double-talk
 * suppression cuts the user's first syllables: a lower line silences more of those (a user 10 dB
 * over the echo: about a quarter of their voiced frames at 15 dB, an eighth at 25), a higher one
 * lets the residual echo of real speech through as speech (from about 45 dB).
 */
export const ECHO_GATE_DB = 25;

/** Whether echo cancellation and the WebRTC VAD are available in this build. */
export function apmAvailable(): boolean {
  return native.apmAvailable();
}

/** A native engine: its handle and the host-heap bytes making it took. */
export interface ApmEngine {
  readonly handle: ApmHandle;
  readonly heapBytes: number;
}

/**
 * What one engine may take from the host heap, charged to the cap for it: an upper bound, as a
 * footprint is. The heap is measured as the engine is made (`heapBytes`: about 380 KB for the
 * canceller, 30 KB for the VAD with this library), but other threads allocate and free at the
 * same time, so a measurement can be off either way; the bound cannot.
 */
export const APM_HEAP_BOUND = { echo: 1 << 20, voice: 128 << 10 } as const;

function create(echo: number, highPass: boolean, noise: number, voice: number, agnostic: boolean): { handle: ApmHandle; heapBytes: number } {
  if (!native.apmAvailable()) {
    throw new UnsupportedError(
      'echo cancellation and voice activity are off: the native addon was built without WebRTC audio processing (install ' +
        'libwebrtc-audio-processing-dev and rebuild)',
    );
  }
  return native.apmCreate(echo, highPass ? 1 : 0, noise, voice, agnostic ? 1 : 0);
}

export interface EchoCancellerOptions {
  /** Noise suppression level, 0 (off) to 4. Default 2. */
  noise?: number;
  /** High-pass filter. Default on. */
  highPass?: boolean;
  /** How hard residual echo is suppressed. Default 'moderate'. */
  suppression?: 'low' | 'moderate' | 'high';
  /**
   * Delay from a far-end sample's aligned position to its echo in the microphone, as far as the
   * device knows it (its output and input latency), 0..500 ms. Unknown: the engine estimates it,
   * which converges far more slowly.
   */
  delayMs?: number;
  /**
   * Residual echo gate, dB: while the far end plays, a frame the canceller took more than this
   * out of is echo alone, and is silenced (what the engine leaves of the echo, quiet as it is,
   * still sounds like speech to a VAD). A frame with the user in it keeps far more. 0: off.
   * Default ECHO_GATE_DB.
   */
  gateDb?: number;
}

export class EchoCanceller {
  readonly heapBytes: number;
  readonly #handle: ApmHandle;
  readonly #near: Float32Array; // [APM_FRAME]
  readonly #far: Float32Array; // [APM_FRAME]
  readonly #out: Float32Array; // [APM_FRAME]
  readonly #delay: number;
  #fill = 0;
  #micEnergy = 0;
  #outEnergy = 0;
  #activeFrames = 0;
  /**
   * Whether the far end played (above -60 dBFS) recently enough for its echo to be in the
   * microphone still: within the reported delay and 300 ms of room and filter tail.
   */
  farActive = false;
  #farHold = 0;
  readonly #holdFrames: number;
  readonly #gate: number; // energy ratio out/mic below which a far-end frame is echo alone
  /** Frames the residual echo gate silenced. */
  gated = 0;
  /**
   * Latched once the canceller has converged: over at least 3 s of far-end activity, the
   * smoothed echo return loss enhancement has reached 20 dB. Until then residual echo may
   * sound like speech, so barge-in waits for it.
   */
  converged = false;
  /** Frames processed, and those in which the engine judged echo present. */
  frames = 0;
  echoFrames = 0;
  errors = 0;

  /** The engine for `o`, to be held before the canceller is built around it (or made by it). */
  static engine(o: EchoCancellerOptions = {}): ApmEngine {
    if (o.delayMs !== undefined && !(Number.isInteger(o.delayMs) && o.delayMs >= 0 && o.delayMs <= 500)) {
      throw new ArgumentError(`echo canceller delayMs must be an integer 0..500, got ${o.delayMs}`);
    }
    return create({ low: 1, moderate: 2, high: 3 }[o.suppression ?? 'moderate'], o.highPass ?? true, o.noise ?? 2, 0, o.delayMs === undefined);
  }

  constructor(o: EchoCancellerOptions = {}, ws: Workspace = heapWorkspace, made: ApmEngine = EchoCanceller.engine(o)) {
    this.#delay = o.delayMs ?? 0;
    this.#holdFrames = Math.ceil(((o.delayMs ?? 500) + 300) / 10);
    const gate = o.gateDb ?? ECHO_GATE_DB;
    if (!(gate >= 0 && gate <= 60)) throw new ArgumentError(`echo canceller gateDb must be 0..60, got ${gate}`);
    this.#gate = gate === 0 ? 0 : 10 ** (-gate / 10);
    this.#handle = made.handle;
    this.heapBytes = made.heapBytes;
    this.#near = ws('aec.near', Float32Array, APM_FRAME);
    this.#far = ws('aec.far', Float32Array, APM_FRAME);
    this.#out = ws('aec.out', Float32Array, APM_FRAME);
  }

  /** Most samples `push` of `n` can write. */
  maxOutput(n: number): number {
    return Math.floor((n + APM_FRAME - 1) / APM_FRAME) * APM_FRAME;
  }

  /**
   * Cancels the echo of `far[fa, fa + n)` (played at the same device time) from
   * `near[na, na + n)`; writes whole cleaned frames to `out` at `at` and returns how many samples.
   */
  push(near: Float32Array, na: number, far: Float32Array, fa: number, n: number, out: Float32Array, at: number): number {
    let w = 0;
    for (let i = 0; i < n; ) {
      const k = Math.min(APM_FRAME - this.#fill, n - i);
      for (let j = 0; j < k; j++) {
        this.#near[this.#fill + j] = near[na + i + j]!;
        this.#far[this.#fill + j] = far[fa + i + j]!;
      }
      this.#fill += k;
      i += k;
      if (this.#fill < APM_FRAME) break;
      this.#fill = 0;
      const flags = native.apmProcess(this.#handle, this.#near, 0, this.#far, 0, this.#out, 0, this.#delay);
      this.frames++;
      if (flags < 0) {
        // The engine refused the frame: pass the microphone through rather than drop it.
        this.errors++;
        out.set(this.#near, at + w);
      } else {
        if ((flags & APM_ECHO) !== 0) this.echoFrames++;
        if (this.#track()) {
          this.gated++;
          out.fill(0, at + w, at + w + APM_FRAME);
        } else out.set(this.#out, at + w);
      }
      w += APM_FRAME;
    }
    return w;
  }

  /**
   * Follows far-end activity and the enhancement over it (smoothed over about half a second);
   * returns whether the frame is echo alone (the residual echo gate).
   */
  #track(): boolean {
    let ef = 0;
    let em = 0;
    let eo = 0;
    for (let i = 0; i < APM_FRAME; i++) {
      ef += this.#far[i]! * this.#far[i]!;
      em += this.#near[i]! * this.#near[i]!;
      eo += this.#out[i]! * this.#out[i]!;
    }
    if (ef > APM_FRAME * 1e-6) this.#farHold = this.#holdFrames;
    else if (this.#farHold > 0) this.#farHold--;
    this.farActive = this.#farHold > 0;
    if (ef > APM_FRAME * 1e-6 && !this.converged) {
      this.#micEnergy = 0.98 * this.#micEnergy + em;
      this.#outEnergy = 0.98 * this.#outEnergy + eo;
      this.#activeFrames++;
      if (this.#activeFrames >= CONVERGE_FRAMES && this.#micEnergy >= 100 * this.#outEnergy) this.converged = true;
    }
    return this.farActive && eo < this.#gate * em;
  }

  /** Frees the engine now (it is also freed when collected). */
  close(): void {
    native.apmDestroy(this.#handle);
  }
}

/** Voice likelihood thresholds of the WebRTC VAD, least to most eager to say "no voice". */
export const VAD_LIKELIHOOD = { 'very-low': 1, low: 2, moderate: 3, high: 4 } as const;
export type VadLikelihood = keyof typeof VAD_LIKELIHOOD;
/**
 * The frames WebRTC's VAD holds "voice" after a run of speech, by likelihood level (its
 * aggressive modes hang over 90 ms at 10 ms frames, the others 140 ms: vad_core.c's overhang).
 */
const VAD_HANGOVER = [0, 9, 9, 14, 14];

/** WebRTC's VAD (the GMM detector inside the audio processing module), one decision per 10 ms. */
export class VoiceDetector {
  readonly heapBytes: number;
  readonly #handle: ApmHandle;
  readonly #frame: Float32Array; // [APM_FRAME]
  readonly #out: Float32Array; // [APM_FRAME]
  #fill = 0;
  hangover: number;

  /** The engine for `likelihood`, to be held before the detector is built around it. */
  static engine(likelihood: VadLikelihood = defaultOf('vad') as VadLikelihood): ApmEngine {
    const level = VAD_LIKELIHOOD[likelihood];
    if (level === undefined) throw new InternalError(`unknown VAD likelihood '${likelihood}'`);
    return create(0, false, 0, level, false);
  }

  constructor(
    likelihood: VadLikelihood = defaultOf('vad') as VadLikelihood,
    ws: Workspace = heapWorkspace,
    made: ApmEngine = VoiceDetector.engine(likelihood),
  ) {
    this.#handle = made.handle;
    this.heapBytes = made.heapBytes;
    this.#frame = ws('vad.frame', Float32Array, APM_FRAME);
    this.#out = ws('vad.out', Float32Array, APM_FRAME);
    this.hangover = VAD_HANGOVER[VAD_LIKELIHOOD[likelihood]]!;
  }

  /** A new voice likelihood from the next frame on (the detector's state carries over). */
  setLikelihood(likelihood: VadLikelihood): void {
    const level = VAD_LIKELIHOOD[likelihood];
    if (level === undefined) throw new InternalError(`unknown VAD likelihood '${likelihood}'`);
    this.setLevel(level);
  }

  /** `setLikelihood` by its level (VAD_LIKELIHOOD's values, 1..4). */
  setLevel(level: number): void {
    native.apmSetVoice(this.#handle, level);
    this.hangover = VAD_HANGOVER[level] ?? 0;
  }

  /**
   * Takes `pcm[at, at + n)`; writes one decision (1 voice, 0 not) per completed frame to
   * `decisions` from `dAt`, and returns how many frames completed.
   */
  push(pcm: Float32Array, at: number, n: number, decisions: Uint8Array, dAt: number): number {
    let frames = 0;
    for (let i = 0; i < n; ) {
      const k = Math.min(APM_FRAME - this.#fill, n - i);
      for (let j = 0; j < k; j++) this.#frame[this.#fill + j] = pcm[at + i + j]!;
      this.#fill += k;
      i += k;
      if (this.#fill < APM_FRAME) break;
      this.#fill = 0;
      const flags = native.apmProcess(this.#handle, this.#frame, 0, null, 0, this.#out, 0, 0);
      decisions[dAt + frames++] = flags > 0 && (flags & APM_VOICE) !== 0 ? 1 : 0;
    }
    return frames;
  }

  close(): void {
    native.apmDestroy(this.#handle);
  }
}
