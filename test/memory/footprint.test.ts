import t from 'tap';
import { ArgumentError, VoxslabError, FootprintPolicy, MemoryDomain, type TypedArray, type TypedArrayConstructor, alignUp } from '../../src/memory/index.js';
import { prng, randInt } from '../helpers.js';
import { native } from '../../src/native.js';

t.test('policy is captured once and frozen', async (t) => {
  const options = { alignment: 64, redZone: 8 };
  const policy = new FootprintPolicy(options);
  options.alignment = 4096;
  options.redZone = 0;
  t.equal(policy.alignment, 64);
  t.equal(policy.redZone, 8);
  t.ok(Object.isFrozen(policy));
  t.throws(() => {
    (policy as { alignment: number }).alignment = 1;
  }, TypeError);
  t.ok(Object.isFrozen(policy.settings()));
});

t.test('bad options are rejected with the option named', async (t) => {
  t.throws(() => new FootprintPolicy({ alignment: 3 }), { name: 'ArgumentError', message: /'alignment'.*power of two/ });
  t.throws(() => new FootprintPolicy({ alignment: 0 }), /'alignment'/);
  t.throws(() => new FootprintPolicy({ pageSize: 1000 }), /'pageSize'/);
  t.throws(() => new FootprintPolicy({ pageSize: 32, alignment: 64 }), /at least 'alignment'/);
  t.throws(() => new FootprintPolicy({ redZone: -1 }), /'redZone'/);
  t.throws(() => new FootprintPolicy({ redZone: 1.5 }), /'redZone'/);
  t.throws(() => new FootprintPolicy({ maxSlabBytes: 10 }), /'maxSlabBytes'/);
  t.throws(() => new FootprintPolicy(null as never), /must be an object/);
});

t.test('nonsense sizes are rejected before anything is allocated', async (t) => {
  const p = new FootprintPolicy({ redZone: 16 });
  for (const [size, pattern] of [
    [-1, /negative/],
    [1.5, /whole number/],
    [Number.NaN, /NaN/],
    [Number.POSITIVE_INFINITY, /finite/],
    [2 ** 53, /MAX_SAFE_INTEGER/],
    [Number.MAX_SAFE_INTEGER - 10, /overflow/],
    ['12' as unknown as number, /must be a number/],
  ] as const) {
    t.throws(() => p.regionFootprint(size), { name: 'ArgumentError', message: pattern }, `region ${String(size)}`);
    t.throws(() => p.slabFootprint(size), { name: 'ArgumentError', message: pattern }, `slab ${String(size)}`);
  }
  t.throws(() => p.slabFootprint(0), /at least one byte/);
  t.throws(() => p.slabFootprint(p.maxSlabBytes + 1), /exceeds the largest slab/);
  t.throws(() => p.regionFootprint(p.maxSlabBytes), /exceeds the largest slab/);
  t.ok(new ArgumentError('x') instanceof VoxslabError, 'argument errors are voxslab errors');
  t.equal(new ArgumentError('x').code, 'ERR_VOXSLAB_ARGUMENT');
  t.equal(new ArgumentError('x').exitCode, 2);
});

t.test('slab footprint is whole pages and never below the request', async (t) => {
  const p = new FootprintPolicy();
  const r = prng(7);
  for (let i = 0; i < 2000; i++) {
    const n = randInt(r, 1, 1 << 26);
    const f = p.slabFootprint(n);
    t.ok(f >= n && f % p.pageSize === 0 && f - n < p.pageSize, `slab ${n} → ${f}`, { diagnostic: false });
  }
  t.equal(alignUp(65, 64), 128);
});

t.test('every carve uses no more than the policy footprint bound', async (t) => {
  const r = prng(11);
  for (const options of [{}, { alignment: 16 }, { alignment: 256, redZone: 24 }, { redZone: 1 }]) {
    const domain = MemoryDomain.create({ limit: '1GiB', policy: options });
    const owner = domain.owner('ticket', 0);
    const types = [Uint8Array, Int16Array, Float32Array, Float64Array] as const;
    const plan = Array.from({ length: 300 }, () => ({ type: types[randInt(r, 0, 3)]!, length: randInt(r, 0, 5000) }));
    const bound = domain.policy.arenaBytes(plan.map((p) => p.length * p.type.BYTES_PER_ELEMENT));
    const arena = domain.createArena(owner, 'random', { bytes: bound });
    let violations = 0;
    let misaligned = 0;
    for (const [i, p] of plan.entries()) {
      const before = arena.used;
      const view = arena.carve(`r${i}`, 'scratch', p.type as TypedArrayConstructor<TypedArray>, p.length);
      const used = arena.used - before;
      if (used > domain.policy.regionFootprint(view.byteLength)) violations++;
      // Aligned in memory: a SharedArrayBuffer's own bytes need not start on a boundary.
      if (view.length > 0 && native.addressLow(view) % domain.policy.alignment !== 0) misaligned++;
      if (view.length !== p.length || (view.buffer as ArrayBufferLike) !== arena.slab.buffer) violations++;
    }
    t.equal(violations, 0, `no carve exceeds its bound (${JSON.stringify(options)})`);
    t.equal(misaligned, 0, 'every region starts at an aligned address');
    t.ok(arena.used <= bound, 'arena fits the bound computed before allocation');
    domain.releaseSlab(arena.slab);
    t.equal(domain.snapshot().held.total, 0);
  }
});
