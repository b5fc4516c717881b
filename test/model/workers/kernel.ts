// Worker: runs the same GEMM and GEMV as the main thread on shared inputs.
import { parentPort, workerData } from 'node:worker_threads';
import { GEMM_PACK_FLOATS, gemm, gemv } from '../../../src/model/blocks/kernels.js';

const d = workerData as { A: SharedArrayBuffer; W: SharedArrayBuffer; T: number; N: number; K: number };
const A = new Float32Array(d.A);
const W = new Float32Array(d.W);
const C = new Float32Array(d.T * d.N);
gemm(A, W, null, C, d.T, d.N, d.K, new Float32Array(GEMM_PACK_FLOATS));
const y = new Float32Array(d.N);
gemv({ kind: 'f32', data: W, rows: d.N, cols: d.K }, A.subarray(0, d.K), y);
parentPort!.postMessage({ C, y });
