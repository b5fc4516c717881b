// The accounting lock across real threads: a stalled holder, a holder that exits.
import t from 'tap';
import { Worker } from 'node:worker_threads';
import { SharedCounters, SharedStateError } from '../../src/memory/index.js';

const url = new URL('../../src/memory/index.js', import.meta.url).href;

/** A worker that takes the lock, says so, then holds it `holdMs` ms (or exits holding it if -1). */
function holder(buffer: SharedArrayBuffer, holdMs: number): { worker: Worker; locked: Promise<number>; exited: Promise<number> } {
  const src = `
    const { parentPort, workerData, threadId } = require('node:worker_threads');
    import(workerData.url).then(({ SharedCounters }) => {
      const c = new SharedCounters(workerData.buffer);
      c.beginWrite();
      c.add(0, 1);
      parentPort.postMessage(threadId);
      if (workerData.holdMs < 0) process.exit(0);
      const until = Date.now() + workerData.holdMs;
      while (Date.now() < until) {}
      c.endWrite();
      parentPort.postMessage('released');
    });`;
  const worker = new Worker(src, { eval: true, workerData: { url, buffer, holdMs } });
  const locked = new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  // Listened for from the start: a worker that exits right after its message can emit 'exit'
  // before the code awaiting `locked` runs, and a listener added then would wait forever.
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  return { worker, locked, exited };
}

t.test('a lock wait that times out leaves the thread as before: its next write section takes the lock', async (t) => {
  const c = new SharedCounters(4);
  const h = holder(c.buffer, 7000);
  await h.locked;
  const seq = c.sequence;
  t.throws(() => c.beginWrite(), SharedStateError, 'the stalled holder makes the wait time out');
  t.equal(c.sequence, seq, 'the timed-out call changed nothing');
  await new Promise<void>((r) => h.worker.on('message', (m) => m === 'released' && r()));
  await h.worker.terminate();
  // Before the fix the failed call left this thread's depth at 1: this section then ran
  // without the lock and without moving the sequence, so readers saw torn states.
  const before = c.sequence;
  c.beginWrite();
  t.equal(c.sequence, before + 1, 'the section is announced (odd sequence)');
  t.ok(c.holder >= 0, 'and holds the lock');
  c.add(0, 1);
  c.endWrite();
  t.equal(c.sequence, before + 2);
  t.equal(c.holder, -1);
  const out = new Float64Array(4);
  c.read(out, 4);
  t.equal(out[0], 2, 'both write sections counted');
});

t.test('a thread that exits holding the lock: named in the holder word, released by whoever saw it exit', async (t) => {
  const c = new SharedCounters(4);
  const h = holder(c.buffer, -1);
  const id = await h.locked;
  await h.exited;
  t.equal(c.holder, id, 'the dead thread is the holder');
  t.equal(c.sequence % 2, 1, 'its section never ended');
  t.notOk(c.releaseIfHeldBy(id + 1000), 'another thread id releases nothing');
  t.ok(c.releaseIfHeldBy(id), 'its id releases the lock');
  t.equal(c.sequence % 2, 0, 'the sequence is stable again');
  const start = performance.now();
  c.beginWrite();
  c.add(1, 5);
  c.endWrite();
  t.ok(performance.now() - start < 1000, 'the next writer gets the lock at once');
  const out = new Float64Array(4);
  c.read(out, 4);
  t.same([out[0], out[1]], [1, 5]);
});
