import t from 'tap';
import { native } from '../../src/native.js';
import { runWorker } from '../helpers.js';

const probe = new URL('./workers/probe.js', import.meta.url);

t.test('pinning a worker thread moves it to that CPU', async (t) => {
  const cpus = native.allowedCpus();
  t.ok(native.affinitySupported(), 'affinity is supported on this platform');
  t.ok(cpus.length >= 1);
  const target = cpus[cpus.length - 1]!;
  const r = await runWorker<{
    before: number[];
    pin: { ok: boolean; cpu: number; supported: boolean };
    afterPin: { allowed: number[]; current: number };
  }>(probe, { cpu: target, buffer: new SharedArrayBuffer(1 << 20) });
  t.same(r.before, cpus, 'worker starts with the process mask');
  t.ok(r.pin.ok && r.pin.supported, 'pin succeeded');
  t.equal(r.pin.cpu, target, 'pinThread reports the CPU the thread now runs on');
  t.same(r.afterPin.allowed, [target], 'the mask is just that CPU');
  t.equal(r.afterPin.current, target, 'sched_getcpu agrees');
  t.same(native.allowedCpus(), cpus, "the main thread's mask is untouched");
});

t.test('residency of a SharedArrayBuffer grows when its pages are touched', async (t) => {
  // Above glibc's largest dynamic mmap threshold (32 MiB), so the buffer is a fresh mapping
  // whose pages are not resident until touched.
  const bytes = 64 << 20;
  const buffer = new SharedArrayBuffer(bytes);
  const r = await runWorker<{ residentBefore: number; residentAfter: number; typeError: string }>(probe, {
    cpu: native.allowedCpus()[0],
    buffer,
  });
  t.ok(r.residentBefore < bytes / 4, `untouched: ${r.residentBefore} resident bytes`);
  t.equal(r.residentAfter, bytes, 'every page resident after touching each');
  t.equal(native.residentBytes(new Uint8Array(buffer)), bytes, 'the main thread sees the same pages');
  t.equal(native.residentBytes(new Uint8Array(buffer, 100, 1000)), 1000, 'a sub-range counts only its own bytes');
  t.equal(native.residentBytes(new Float32Array(buffer, 0, 0)), 0);
  t.match(r.typeError, /TypeError: residentBytes: argument 1 must be a TypedArray/);
});

t.test('locking and unlocking a range', async (t) => {
  const buffer = new SharedArrayBuffer(1 << 20);
  const locked = native.lockRange(new Uint8Array(buffer));
  if (locked.ok) {
    t.equal(native.residentBytes(new Uint8Array(buffer)), 1 << 20, 'locked pages are resident');
    t.ok(native.unlockRange(new Uint8Array(buffer)).ok);
  } else {
    // Not permitted here (no CAP_IPC_LOCK, small RLIMIT_MEMLOCK): a clean errno, no throw.
    t.ok(locked.errno > 0 && locked.message.length > 0, `lock refused cleanly: ${locked.message}`);
  }
});

t.test('CPU features and page size', async (t) => {
  const f = native.cpuFeatures();
  t.ok(['x64', 'arm64', 'other'].includes(f.arch));
  if (f.arch === 'x64') {
    t.equal(f.neon, false);
    if (f.avx512f) t.ok(f.avx2, 'AVX-512 parts report AVX2 too');
  }
  if (f.arch === 'arm64') t.equal(f.neon, true);
  const p = native.pageSize();
  t.ok(p >= 4096 && (p & (p - 1)) === 0);
  t.ok(native.configuredCpus() >= native.allowedCpus().length);
});

t.test('misuse throws a TypeError or RangeError with a clear message', async (t) => {
  t.throws(() => native.pinThread(3 as never), { name: 'TypeError', message: /pinThread: cpus must be an array/ });
  t.throws(() => native.pinThread([]), { name: 'RangeError', message: /at least one CPU/ });
  t.throws(() => native.pinThread(['0' as never]), { name: 'TypeError', message: /cpus\[0\] must be a number/ });
  t.throws(() => native.pinThread([0.5]), { name: 'RangeError', message: /non-negative integer/ });
  t.throws(() => native.pinThread([-1]), { name: 'RangeError', message: /non-negative integer/ });
  t.throws(() => native.pinThread([100000]), { name: 'RangeError', message: /this machine has CPUs 0\.\./ });
  t.throws(() => (native.pinThread as (...a: unknown[]) => unknown)(), { name: 'TypeError', message: /expects 1 argument/ });
  t.throws(() => native.residentBytes({} as never), { name: 'TypeError', message: /must be a TypedArray/ });
  t.throws(() => native.lockRange(new ArrayBuffer(8) as never), { name: 'TypeError' });
  t.throws(() => (native.pageSize as (...a: unknown[]) => unknown)(1), { name: 'TypeError', message: /expects 0 argument/ });
});
