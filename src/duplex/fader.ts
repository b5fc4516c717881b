/**
 * The playback fader: while playback holds (the user may be speaking) the gain falls to zero
 * over `fadeMs`, and rises again when the hold ends, so a pause or a cut never clicks. The
 * one-thread session and the main thread's device driver run it sample by sample.
 *
 * Thread contract: one thread; nothing allocates.
 */
import { ArgumentError } from '../errors.js';

/** The fade when playback holds or a reply is cut, ms: short enough not to delay a barge-in, long enough not to click. */
export const FADE_MS = 10;

/** `fadeMs` if it is a fade length a Fader takes (1..1000 ms); an ArgumentError otherwise. */
export function checkFadeMs(fadeMs: number): number {
  if (!(fadeMs >= 1 && fadeMs <= 1000)) throw new ArgumentError(`fadeMs must be 1..1000, got ${fadeMs}`);
  return fadeMs;
}

export class Fader {
  /** The gain of the next sample, 0..1. */
  gain = 1;
  readonly #step: number;

  constructor(fadeMs: number, rate: number) {
    checkFadeMs(fadeMs);
    this.#step = 1 / ((fadeMs * rate) / 1000);
  }

  /** One sample's step toward silence (`hold`) or full gain. */
  step(hold: boolean): void {
    this.gain = hold ? Math.max(0, this.gain - this.#step) : Math.min(1, this.gain + this.#step);
  }

  /** Whether a sample plays now: not once a hold has faded it out. */
  audible(hold: boolean): boolean {
    return !hold || this.gain > 0;
  }

  /** Cut at once (a barge-in dropped what was playing); the next reply fades in. */
  silence(): void {
    this.gain = 0;
  }
}
