/** The interface every voice activity detector of the project implements (WebRTC's, Silero's). */

/**
 * A voice detector: one decision per 10 ms frame of the audio pushed, in order. A frame may be
 * decided some frames after its audio was pushed (Silero decides a 32 ms window at a time).
 */
export interface FrameDecider {
  /** Takes `pcm[at, at + n)`; writes the frames decided to `decisions` from `dAt`; returns their count. */
  push(pcm: Float32Array, at: number, n: number, decisions: Uint8Array, dAt: number): number;
  /** Frames its decisions keep saying voice after speech stops (a fixed hangover; 0 if none is known). */
  readonly hangover: number;
  close(): void;
}
