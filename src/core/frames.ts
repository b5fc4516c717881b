/** Reply-frame arithmetic: device samples per frame, and the checkpoints a look-ahead needs. */
import type { ModelConfig } from '../model/format/config.js';

/** Device-rate samples of one reply frame at `rate` (a frame's audio, rounded up). */
export function frameSamplesAt(config: ModelConfig, rate: number): number {
  const d = config.detokenizer;
  return Math.ceil((rate * d.upsample * d.hop) / d.sampleRate);
}

/** Milliseconds of audio one reply frame carries. */
export function framePeriodMs(config: ModelConfig): number {
  const d = config.detokenizer;
  return (1000 * d.upsample * d.hop) / d.sampleRate;
}

/**
 * Reply frames barge-in may need to truncate back to when generation runs at most `lookaheadMs`
 * ahead of playback: the look-ahead's frames and a margin for the frames in flight.
 */
export function checkpointsFor(config: ModelConfig, lookaheadMs: number): number {
  return Math.ceil(lookaheadMs / framePeriodMs(config)) + 8;
}
