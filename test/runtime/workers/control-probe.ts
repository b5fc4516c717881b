// Worker: control calls in a loop, the heap after full collections measured over windows.
// It runs in a worker of its own so the test runner's async bookkeeping (kept per promise on
// its own thread) is not in what it measures.
import v8 from 'node:v8';
import vm from 'node:vm';
import { parentPort, workerData } from 'node:worker_threads';
import { load } from '../../../src/index.js';

const d = workerData as { dir: string; rounds: number; windows: number };
const engine = await load(d.dir, { memoryLimit: '1GiB' });
// gc is exposed only once the stage workers exist: theirs would collect on every stats call.
v8.setFlagsFromString('--expose-gc');
v8.setFlagsFromString('--no-flush-bytecode');
const gc = vm.runInNewContext('gc') as () => void;
const heap = (): number => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
const kept: unknown[] = [];
/** Heap growth over each of `windows` windows of `rounds` rounds, after one window not counted (the heap settles); with `leak`, 32 numbers kept per round. */
async function windows(leak: boolean): Promise<number[]> {
  const out: number[] = [];
  for (let w = -1; w < d.windows; w++) {
    const before = heap();
    for (let i = 0; i < d.rounds; i++) {
      const s = await engine.pipeline.stats();
      if (leak) kept.push(Array.from({ length: 32 }, (_, k) => s[0]!.records + k));
    }
    if (w >= 0) out.push(heap() - before);
  }
  return out;
}
try {
  for (let i = 0; i < 1000; i++) await engine.pipeline.stats();
  const clean = await windows(false);
  // The negative control, after: something kept per round.
  const leaking = await windows(true);
  parentPort!.postMessage({ clean, leaking, kept: kept.length });
} finally {
  await engine.close();
}
