import t from 'tap';
import { native } from '../../src/native.js';
import { runWorker } from '../helpers.js';

const probe = new URL('./workers/probe.js', import.meta.url);

t.test('pinning a worker thread moves it to that CPU', { skip: native.affinitySupported() ? false : 'this OS has no thread affinity call' }, async (t) => {
  const cpus = native.allowedCpus();
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
  // AddressSanitizer's runtime (native/sanitize.sh) replaces mlock with a no-op that succeeds.
  const mlockIsReal = !/libasan/.test(process.env.LD_PRELOAD ?? '');
  if (locked.ok) {
    if (mlockIsReal) t.equal(native.residentBytes(new Uint8Array(buffer)), 1 << 20, 'locked pages are resident');
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

t.test("a thread's CPU clock counts its own work, not its sleep", async (t) => {
  const c = new Float64Array(4);
  native.threadCpuInto(c, 0);
  let x = 0;
  for (let i = 0; i < 2e7; i++) x += Math.sqrt(i);
  native.threadCpuInto(c, 2);
  t.ok(x > 0);
  t.ok((c[2] as number) - (c[0] as number) > 1, `busy: ${((c[2] as number) - (c[0] as number)).toFixed(2)} ms of CPU`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
  native.threadCpuInto(c, 3);
  t.ok((c[3] as number) - (c[2] as number) < 100, `asleep 200 ms: ${((c[3] as number) - (c[2] as number)).toFixed(2)} ms of CPU`);
  t.throws(() => native.threadCpuInto(c, 4), /threadCpuInto: index is past the end of out/);
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

t.test('native FFT equals the TypeScript reference for many lengths', async (t) => {
  const { ComplexFFT } = await import('../../src/dsp/fft.js');
  let seed = 3;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return (seed / 2147483648) * 2 - 1;
  };
  for (const n of [1, 2, 3, 4, 5, 6, 8, 12, 15, 30, 64, 100, 512, 640, 1280, 1001]) {
    const f = new ComplexFFT(n);
    const x = Float64Array.from({ length: 2 * n }, rand);
    for (const dir of ['forward', 'inverse'] as const) {
      const a = new Float64Array(2 * n);
      const b = new Float64Array(2 * n);
      f[dir](x, a);
      f[dir === 'forward' ? 'forwardTs' : 'inverseTs'](x, b);
      let worst = 0;
      let scale = 0;
      for (let i = 0; i < 2 * n; i++) {
        worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
        scale = Math.max(scale, Math.abs(b[i]!));
      }
      t.ok(worst <= 1e-12 * Math.max(1, scale), `n=${n} ${dir}: max difference ${worst.toExponential(2)}`, { diagnostic: false });
    }
  }
  t.ok(['avx2+fma', 'scalar'].includes(native.kernelPath()), `dot path: ${native.kernelPath()}`);
});

t.test("the ISTFT's polar spectrum: within two ulps of the JS engine's exp, cos and sin, and its edges", async (t) => {
  // The gap between two doubles' bit patterns, in units in the last place.
  const bits = new BigInt64Array(new Float64Array(2).buffer);
  const f = new Float64Array(bits.buffer);
  const ulps = (a: number, b: number): number => {
    if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b) ? 0 : Infinity;
    if (a === b) return 0;
    f[0] = a;
    f[1] = b;
    const d = bits[0]! - bits[1]!;
    return Number(d < 0n ? -d : d);
  };
  let seed = 11;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  // 1001 bins: the vector passes and a tail; magnitudes up to e^±700, phases to ±2·10^6 (past
  // the fast reduction's range).
  for (const [mags, phases] of [
    [8, 20],
    [700, 2e6],
  ] as const) {
    const bins = 1001;
    const v = new Float32Array(2 * bins);
    for (let k = 0; k < bins; k++) {
      v[k] = (rand() * 2 - 1) * mags;
      v[bins + k] = (rand() * 2 - 1) * phases;
    }
    // e^m alone (phase 0) and the sine and cosine alone (magnitude e^0 = 1).
    const e = new Float32Array(2 * bins);
    e.set(v.subarray(0, bins));
    const trig = new Float32Array(2 * bins);
    trig.set(v.subarray(bins), bins);
    const s = new Float64Array(2 * bins);
    native.polarSpectrum(e, 0, bins, s);
    let worstExp = 0;
    for (let k = 0; k < bins; k++) worstExp = Math.max(worstExp, ulps(s[2 * k]!, Math.exp(e[k]!)), ulps(s[2 * k + 1]!, 0));
    native.polarSpectrum(trig, 0, bins, s);
    let worstTrig = 0;
    for (let k = 0; k < bins; k++) {
      const p = trig[bins + k]!;
      worstTrig = Math.max(worstTrig, Math.abs(p) > 1.6e6 ? 0 : Math.max(ulps(s[2 * k]!, Math.cos(p)), ulps(s[2 * k + 1]!, Math.sin(p))));
    }
    t.ok(worstExp <= 2, `|m| ≤ ${mags}: e^m within ${worstExp} ulps`);
    t.ok(worstTrig <= 2, `|phase| ≤ ${phases}: cos and sin within ${worstTrig} ulps`);
    // Past the fast reduction the phase is reduced by 2π first: still close in absolute terms.
    let far = 0;
    for (let k = 0; k < bins; k++) {
      const p = trig[bins + k]!;
      if (Math.abs(p) > 1.6e6) far = Math.max(far, Math.abs(s[2 * k]! - Math.cos(p)), Math.abs(s[2 * k + 1]! - Math.sin(p)));
    }
    t.ok(far < 1e-9, `phases past the fast reduction: within ${far.toExponential(1)}`);
    // The product of both, as the ISTFT takes it.
    native.polarSpectrum(v, 0, bins, s);
    let worst = 0;
    for (let k = 0; k < bins; k++) {
      const [m, p] = [v[k]!, v[bins + k]!];
      if (Math.abs(p) > 1.6e6) continue;
      worst = Math.max(worst, ulps(s[2 * k]!, Math.exp(m) * Math.cos(p)), ulps(s[2 * k + 1]!, Math.exp(m) * Math.sin(p)));
    }
    t.ok(worst <= 4, `e^m·(cos, sin) p within ${worst} ulps`);
  }
  // Edges, each in a vector pass of otherwise ordinary bins: overflow, underflow to 0 and to
  // subnormals, NaN and infinities (NaN out), and the offset `at`.
  const edges: [number, number][] = [
    [710, 0],
    [-746, 1],
    [-740, 0],
    [Number.NaN, 0],
    [0, Number.POSITIVE_INFINITY],
    [Number.NEGATIVE_INFINITY, 0],
    [88, Math.fround(Math.PI)],
    [-1, -3],
  ];
  const v = new Float32Array(3 + 2 * edges.length).fill(7);
  edges.forEach(([m, p], k) => {
    v[3 + k] = m;
    v[3 + edges.length + k] = p;
  });
  const s = new Float64Array(2 * edges.length);
  native.polarSpectrum(v, 3, edges.length, s);
  edges.forEach(([m, p], k) => {
    const [re, im] = [Math.exp(m) * Math.cos(p), Math.exp(m) * Math.sin(p)];
    t.ok(ulps(s[2 * k]!, re) <= 2 && ulps(s[2 * k + 1]!, im) <= 2, `e^${m}·(cos, sin) ${p}: (${s[2 * k]}, ${s[2 * k + 1]}) as the JS engine's (${re}, ${im})`);
  });
  t.ok(s[4]! > 0 && s[4]! < 2.3e-308, `e^-740 is subnormal: ${s[4]}`);
  t.throws(() => native.polarSpectrum(v, 4, edges.length, s), { name: 'RangeError', message: /values need 2·bins values after at/ });
  t.throws(() => native.polarSpectrum(v, 3, edges.length, new Float64Array(3)), { name: 'RangeError', message: /spectrum needs 2·bins values/ });
  t.throws(() => native.polarSpectrum(new Float64Array(4) as never, 0, 2, s), { name: 'TypeError', message: /values must be a Float32Array/ });
  // The overlap-add rings: a power of two long, as long as the frame, and not overlapping.
  const frame = Float64Array.from({ length: 8 }, (_, j) => j + 1);
  const win = new Float64Array(8).fill(0.5);
  const [acc, env] = [new Float64Array(16), new Float64Array(16)];
  native.overlapAdd(frame, win, acc, env, 14, 1);
  t.same([acc[15], acc[0], acc[5], acc[14], env[15]], [1, 1.5, 4, 0, 0.25], 'overlapAdd: from `from`, at (start + j) & mask, wrapping');
  const pcm = new Float32Array(4);
  t.equal(native.overlapEmit(acc, env, 15, 17, 1e-11, pcm, 1), 2);
  t.same(Array.from(pcm), [0, 4, 6, 0], 'overlapEmit: acc ÷ envelope from the ring, wrapping');
  t.same([acc[15], env[0], acc[1]], [0, 0, 2], 'and clears what it read');
  t.throws(() => native.overlapAdd(frame, win, new Float64Array(12), new Float64Array(12), 0, 0), { name: 'RangeError', message: /power-of-two/ });
  t.throws(() => native.overlapAdd(frame, win, new Float64Array(4), new Float64Array(4), 0, 0), { name: 'RangeError', message: /rings at least that long/ });
  t.throws(() => native.overlapAdd(frame, win.subarray(1), acc, env, 0, 0), { name: 'RangeError', message: /window must be the frame's length/ });
  t.throws(() => native.overlapAdd(frame, win, acc, acc, 0, 0), { name: 'RangeError', message: /must not overlap/ });
  t.throws(() => native.overlapEmit(acc, env, 0, 3, 0, pcm, 2), { name: 'RangeError', message: /no room for 3 samples/ });
  t.throws(() => native.overlapEmit(acc, env, 0, 17, 0, new Float32Array(32), 0), { name: 'RangeError', message: /more samples than the rings hold/ });
});

t.test('DSP kernels check every argument', async (t) => {
  const { ComplexFFT } = await import('../../src/dsp/fft.js');
  const f64 = (n: number) => new Float64Array(n);
  const plan = Int32Array.from([4, 2, 2, 1]);
  t.throws(() => native.fft(plan, f64(16), f64(8), f64(16), f64(16), 8, 'yes' as never), { name: 'TypeError', message: /inverse must be a boolean/ });
  t.throws(() => native.fft(plan, f64(16), f64(8), new Float32Array(16) as never, f64(16), 8, false), {
    name: 'TypeError',
    message: /input must be a Float64Array/,
  });
  t.throws(() => native.fft(plan, f64(16), f64(8), f64(8), f64(16), 8, false), { name: 'RangeError', message: /need 2·n values/ });
  t.throws(() => native.fft(Int32Array.from([4, 2, 3, 1]), f64(16), f64(8), f64(16), f64(16), 8, false), {
    name: 'RangeError',
    message: /factor plan does not match n/,
  });
  t.throws(() => native.fft(plan, f64(16), f64(2), f64(16), f64(16), 8, false), { name: 'RangeError', message: /scratch is too small/ });
  const shared = f64(32);
  t.throws(() => native.fft(plan, f64(16), f64(8), shared.subarray(0, 16), shared.subarray(8, 24), 8, false), {
    name: 'RangeError',
    message: /must not overlap/,
  });
  t.ok(new ComplexFFT(8));
  const state = f64(8);
  state.set([0, 0, 0, 1, 3, 4, 1]);
  const out = new Float32Array(1);
  t.throws(() => native.resampleRun(f64(4), f64(8), state, new Float32Array(30), 30, out, 0, 0), {
    name: 'RangeError',
    message: /out has room for 1 samples after outAt, the call completes 10/,
  });
  t.throws(() => native.resampleRun(f64(4), f64(8), state, new Float32Array(3), 5, out, 0, 0), { name: 'RangeError', message: /count exceeds the input/ });
  t.throws(() => native.resampleRun(f64(2), f64(8), state, new Float32Array(3), 3, out, 0, 0), {
    name: 'RangeError',
    message: /does not match the phase table/,
  });
  t.throws(() => native.resampleRun(f64(4), f64(8), f64(4), new Float32Array(3), 3, out, 0, 0), { name: 'RangeError', message: /state needs 8 slots/ });
  t.throws(() => native.resampleRun(f64(4), f64(8), state, [1, 2] as never, 2, out, 0, 0), { name: 'TypeError', message: /input must be a Float32Array/ });
  t.throws(() => native.resampleRun(f64(4), f64(8), state, new Float32Array(3), -1, out, 0, 0), {
    name: 'RangeError',
    message: /count must be a non-negative integer/,
  });
});
