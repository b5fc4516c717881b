/**
 * The voice detector a duplex conversation runs (option `vad`): WebRTC's GMM detector at a voice
 * likelihood (the default), or Silero VAD v5 on the project's arithmetic (`silero`). Both give
 * one decision per 10 ms frame; Silero's trail the audio by up to a 32 ms window, so a caller
 * that needs a frame's audio with its decision keeps `maxDecisions` frames of it.
 */
import { APM_FRAME, VoiceDetector, type ApmEngine, type VadLikelihood } from './aec.js';
import { SileroModel, SileroVad } from './silero.js';
import type { Workspace } from './workspace.js';
import type { FrameDecider } from './vad.js';

export type { FrameDecider } from './vad.js';

export type VadChoice = 'silero' | VadLikelihood;

/** What making the detector needs beside its workspace: Silero's weights, or the WebRTC engine's bound and maker. */
export type VoicePrep =
  | { kind: 'silero'; weights: Map<string, Float32Array> }
  | { kind: 'webrtc'; likelihood: VadLikelihood; bound: number; engine: () => ApmEngine };

/** The detector, its buffers (and Silero's weights) carved from `ws`; `engine` is the held WebRTC engine. */
export function makeVoice(prep: VoicePrep, ws: Workspace, engine: ApmEngine | null): FrameDecider {
  if (prep.kind === 'silero') return new SileroVad(new SileroModel(prep.weights, ws), ws);
  return new VoiceDetector(prep.likelihood, ws, engine as ApmEngine);
}

/**
 * Decisions one push of `n` samples may give. It also bounds the frames from the oldest one a
 * push decides to the newest it brought: a frame is decided at the latest with the window that
 * holds its centre.
 */
export function maxDecisions(prep: VoicePrep, n: number): number {
  return prep.kind === 'silero' ? SileroVad.maxFrames(n) : Math.ceil(n / APM_FRAME) + 1;
}
