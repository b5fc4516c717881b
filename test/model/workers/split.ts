// Worker: GEMV calls with two compute threads for a while, started together with its peers.
import { parentPort, workerData } from 'node:worker_threads';
import { gemv, setComputeThreads } from '../../../src/model/blocks/kernels.js';
import { native } from '../../../src/native.js';

const d = workerData as { W: SharedArrayBuffer; x: SharedArrayBuffer; rows: number; cols: number; go: SharedArrayBuffer; ms: number };
setComputeThreads(2);
const W = new Float32Array(d.W);
const x = new Float32Array(d.x);
const y = new Float32Array(d.rows);
const go = new Int32Array(d.go);
// Word 1 counts the workers at the start line; word 0 is the start.
Atomics.add(go, 1, 1);
Atomics.wait(go, 0, 0);
const t0 = performance.now();
let calls = 0;
while (performance.now() - t0 < d.ms) {
  gemv({ kind: 'f32', data: W, rows: d.rows, cols: d.cols }, x, y);
  calls++;
}
parentPort!.postMessage({ y, calls, narrowed: native.computeNarrowed() });
setComputeThreads(1);
