// Prints the instruction set and a digest of the prefill kernel's outputs on fixed inputs, so
// that processes forced onto different paths can compare bits.
import { createHash } from 'node:crypto';
import { kernelIsa, linearPrefill, prefillScratchFloats, type Weights } from '../../../src/model/blocks/kernels.js';
import { quantize } from '../../../src/model/format/quant.js';
import { prng } from '../../helpers.js';

const r = prng(41);
const digest = createHash('sha256');
for (const [bits, group, rows, cols, n] of [
  [4, 64, 37, 576, 70],
  [4, 32, 9, 256, 17],
  [8, 32, 21, 320, 33],
  [8, 64, 5, 1024, 16],
] as const) {
  const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
  const q = quantize(w, rows, cols, bits, group);
  const W: Weights = { kind: bits === 8 ? 'q8' : 'q4', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols };
  const X = Float32Array.from({ length: n * cols }, () => (r() * 2 - 1) * 3);
  const Y = new Float32Array(n * rows);
  linearPrefill(W, X, Y, n, new Float32Array(prefillScratchFloats(n, cols)));
  digest.update(new Uint8Array(Y.buffer));
}
console.log(JSON.stringify([kernelIsa(), digest.digest('hex')]));
