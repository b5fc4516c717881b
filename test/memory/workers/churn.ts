// Worker for the concurrency tests: joins the parent's memory domain and reserves,
// allocates and frees slabs, either a seeded number of times or until told to stop.
import { parentPort, workerData } from 'node:worker_threads';
import { AllocationError, CountingAllocator, MemoryDomain, MemoryLimitError, type SharedMemoryDomain, type Slab } from '../../../src/memory/index.js';
import { prng, randInt } from '../../helpers.js';

export interface ChurnData {
  shared: SharedMemoryDomain;
  control: SharedArrayBuffer; // Int32 [kReady, kGo, kStop]
  id: number;
  seed: number;
  /** Operations to run; 0 = run until kStop is set. */
  ops: number;
  maxBytes: number;
  /** Fail roughly this fraction of allocator calls (seeded). */
  failRate: number;
  checkEvery: number;
}

export interface ChurnResult {
  ops: number;
  allocated: number;
  refused: number;
  failed: number;
  released: number;
  overCap: number;
  snapshots: number;
}

const kReady = 0;
const kGo = 1;
const kStop = 2;

const d = workerData as ChurnData;
const r = prng(d.seed);
const allocator = new CountingAllocator().failWhen(() => r() < d.failRate);
const domain = MemoryDomain.attach(d.shared, { allocator });
const owner = domain.owner('ticket', d.id);
const control = new Int32Array(d.control);
const live: Slab[] = [];
const res: ChurnResult = { ops: 0, allocated: 0, refused: 0, failed: 0, released: 0, overCap: 0, snapshots: 0 };

Atomics.add(control, kReady, 1);
Atomics.notify(control, kReady);
while (Atomics.load(control, kGo) === 0) Atomics.wait(control, kGo, 0, 100);

for (let i = 0; d.ops === 0 ? Atomics.load(control, kStop) === 0 : i < d.ops; i++) {
  res.ops++;
  if (live.length === 0 || r() < 0.55) {
    try {
      const slab = domain.createSlab(owner, randInt(r, 1, d.maxBytes));
      // Carving moves bytes between categories inside the owner while others read.
      slab.charge('scratch', 64, Math.min(slab.bytes, 4096));
      live.push(slab);
      res.allocated++;
    } catch (e) {
      if (e instanceof MemoryLimitError) res.refused++;
      else if (e instanceof AllocationError) res.failed++;
      else throw e;
    }
  } else {
    const k = randInt(r, 0, live.length - 1);
    domain.releaseSlab(live[k]!);
    live[k] = live[live.length - 1]!;
    live.pop();
    res.released++;
  }
  if (d.checkEvery > 0 && i % d.checkEvery === 0) {
    const s = domain.snapshot();
    res.snapshots++;
    if (s.held.total + s.reserved > s.limit) res.overCap++;
  }
}
for (const s of live) {
  domain.releaseSlab(s);
  res.released++;
}
parentPort!.postMessage(res);
