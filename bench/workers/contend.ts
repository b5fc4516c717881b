// Benchmark worker: reserve → commit → release (and reserve → refund) cycles against a shared
// memory domain, started together with its peers through an Atomics barrier.
import { parentPort, workerData } from 'node:worker_threads';
import { MemoryDomain, type SharedMemoryDomain } from '../../src/memory/index.js';
import { cycleCommit, cycleRefund } from '../memory.js';

const d = workerData as { shared: SharedMemoryDomain; control: SharedArrayBuffer; id: number; n: number };
const domain = MemoryDomain.attach(d.shared);
const owner = domain.owner('ticket', d.id);
const control = new Int32Array(d.control);
cycleCommit(domain, owner, 1000);
Atomics.add(control, 0, 1);
Atomics.notify(control, 0);
while (Atomics.load(control, 1) === 0) Atomics.wait(control, 1, 0, 50);
const t0 = process.hrtime.bigint();
cycleCommit(domain, owner, d.n);
const t1 = process.hrtime.bigint();
cycleRefund(domain, owner, d.n);
const t2 = process.hrtime.bigint();
parentPort!.postMessage({ commitNs: Number(t1 - t0) / d.n, refundNs: Number(t2 - t1) / d.n });
