// Worker for the native tests: pins itself, then measures residency of a buffer it is given.
import { parentPort, workerData } from 'node:worker_threads';
import { native } from '../../../src/native.js';

const { cpu, buffer } = workerData as { cpu: number; buffer: SharedArrayBuffer };
const before = native.allowedCpus();
const pin = native.pinThread([cpu]);
const afterPin = { allowed: native.allowedCpus(), current: native.currentCpu() };
const view = new Uint8Array(buffer);
const residentBefore = native.residentBytes(view);
const page = native.pageSize();
for (let i = 0; i < view.length; i += page) view[i] = 1;
// The buffer need not start on a page boundary: touch the last byte too.
view[view.length - 1] = 1;
const residentAfter = native.residentBytes(view);
let typeError = '';
try {
  native.residentBytes(buffer as never);
} catch (e) {
  typeError = `${(e as Error).name}: ${(e as Error).message}`;
}
parentPort!.postMessage({ before, pin, afterPin, residentBefore, residentAfter, typeError, features: native.cpuFeatures() });
