import t from 'tap';
import { readFileSync } from 'node:fs';
import { corpusTools, f1, scene } from '../../bench/corpus.js';
import { loadSilero, sileroDecisions, sileroProbabilities } from '../../bench/silero.js';
import { sileroModelPath } from '../../src/io/silero.js';
import { readSileroWeights, SILERO_WINDOW, SileroModel, SileroVad } from '../../src/dsp/silero.js';
import { allocationProbe } from '../helpers.js';

const path = sileroModelPath();
const ready = path !== null && corpusTools();

t.test(
  "Silero VAD on the project arithmetic gives onnxruntime-node's probabilities and decisions",
  { skip: ready ? false : 'espeak-ng, sox or the Silero model missing' },
  async (t) => {
    const ort = await loadSilero();
    if ('reason' in ort) {
      t.fail(ort.reason);
      return;
    }
    const weights = readSileroWeights(readFileSync(path as string), path as string);
    const vad = new SileroVad(new SileroModel(weights));
    const s = scene({ seed: 5, utterances: 4, snrDb: 10, noise: 'pink' });
    const windows = Math.floor(s.signal.length / SILERO_WINDOW);
    const ours = new Float32Array(windows);
    const decisions = new Uint8Array(s.labels.length + 8);
    let frames = 0;
    for (let w = 0; w < windows; w++) {
      frames += vad.push(s.signal, w * SILERO_WINDOW, SILERO_WINDOW, decisions, frames);
      ours[w] = vad.probability;
    }
    const theirs = await sileroProbabilities(ort, s.signal.subarray(0, windows * SILERO_WINDOW));
    let worst = 0;
    for (let w = 0; w < windows; w++) worst = Math.max(worst, Math.abs(ours[w]! - theirs[w]!));
    t.ok(worst < 1e-4, `${windows} windows, largest difference ${worst.toExponential(2)}`);
    const ref = await sileroDecisions(ort, s.signal.subarray(0, windows * SILERO_WINDOW), frames);
    t.same(decisions.subarray(0, frames), ref, `the same ${frames} frame decisions`);
    const score = f1(decisions.subarray(0, frames), s.labels.subarray(0, frames)).f1;
    t.ok(score > 0.85, `frame F1 ${score.toFixed(3)} at 10 dB pink noise`);

    // Negative control: the LSTM's input and forget gates exchanged changes the probabilities.
    const swapped = new Map(weights);
    const wih = Float32Array.from(weights.get('model.decoder.rnn.weight_ih')!);
    wih.copyWithin(0, 128 * 128, 2 * 128 * 128);
    wih.set(weights.get('model.decoder.rnn.weight_ih')!.subarray(0, 128 * 128), 128 * 128);
    swapped.set('model.decoder.rnn.weight_ih', wih);
    const other = new SileroVad(new SileroModel(swapped));
    let moved = 0;
    const sink = new Uint8Array(64);
    for (let w = 0; w < windows; w++) {
      other.push(s.signal, w * SILERO_WINDOW, SILERO_WINDOW, sink, 0);
      moved = Math.max(moved, Math.abs(other.probability - theirs[w]!));
    }
    t.ok(moved > 0.05, `gates exchanged: off by ${moved.toFixed(3)}`);
    await ort.session.release();
  },
);

t.test(
  'Silero VAD allocates nothing per window, and pushes of any size give the same decisions',
  { skip: path === null ? 'the Silero model is missing' : false },
  async (t) => {
    const model = new SileroModel(readSileroWeights(readFileSync(path as string), path as string));
    const signal = Float32Array.from({ length: 16000 * 3 }, (_, i) => 0.3 * Math.sin(i * 0.05) * Math.sin(i * 0.0007));
    const whole = new SileroVad(model);
    const a = new Uint8Array(400);
    const na = whole.push(signal, 0, signal.length, a, 0);
    t.equal(na, Math.floor((Math.floor(signal.length / SILERO_WINDOW) * SILERO_WINDOW - 80) / 160) + 1, "a frame is decided once its centre's window is done");
    const pieces = new SileroVad(model);
    const b = new Uint8Array(400);
    let nb = 0;
    for (let at = 0, k = 1; at < signal.length; at += k, k = (k * 7 + 3) % 700) nb += pieces.push(signal, at, Math.min(k, signal.length - at), b, nb);
    t.equal(nb, na);
    t.same(b.subarray(0, nb), a.subarray(0, na), 'the same decisions in pieces of 1–700 samples');
    const got = allocationProbe(4, () => {
      whole.reset();
      whole.push(signal, 0, signal.length, a, 0);
    });
    t.equal(got.arrayBuffers, 0, 'no ArrayBuffer per 3 s');
    t.ok(got.heap < 1024, `JS heap flat (${got.heap} bytes over 4 × 3 s)`);
  },
);

t.test('a file that is not a Silero model is refused by name, field and offset', async (t) => {
  t.throws(() => readSileroWeights(new Uint8Array([0x3a, 0x05, 1, 2]), 'x.onnx'), {
    name: 'BadInputError',
    message: /x\.onnx, offset \d+: field 7 runs \d+ bytes past its message/,
  });
  t.throws(() => readSileroWeights(new Uint8Array([0x08, 0x07]), 'y.onnx'), {
    name: 'BadInputError',
    message: /y\.onnx, field graph: missing: not an ONNX model/,
  });
  if (path === null) return;
  const bytes = readFileSync(path);
  t.throws(() => readSileroWeights(bytes.subarray(0, bytes.length >> 1), 'half.onnx'), { name: 'BadInputError', message: /half\.onnx/ });
});
