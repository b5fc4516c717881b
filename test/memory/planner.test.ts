import t from 'tap';
import { type BufferSpec, type PlacedBuffer, checkNoOverlap, plan } from '../../src/memory/index.js';
import { prng, randInt } from '../helpers.js';

/** A second oracle for the tests, by brute force over every op: no live pair shares a byte. */
function bruteForceOverlap(p: readonly PlacedBuffer[]): string | null {
  let maxOp = 0;
  for (const b of p) maxOp = Math.max(maxOp, b.lastUse);
  for (let op = 0; op <= maxOp; op++) {
    const live = p.filter((b) => b.firstUse <= op && op <= b.lastUse && b.bytes > 0);
    for (let i = 0; i < live.length; i++) {
      for (let j = i + 1; j < live.length; j++) {
        const a = live[i]!;
        const b = live[j]!;
        if (a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes) {
          const handover = (b.inPlaceOf === a.name || a.inPlaceOf === b.name) && a.offset === b.offset && (a.lastUse === op || b.lastUse === op);
          if (!handover) return `${a.name} and ${b.name} at op ${op}`;
        }
      }
    }
  }
  return null;
}

function randomSet(seed: number, n: number, span: number, maxBytes: number): BufferSpec[] {
  const r = prng(seed);
  return Array.from({ length: n }, (_, i) => {
    const first = randInt(r, 0, span);
    return { name: `b${i}`, bytes: Math.max(1, Math.floor(r() ** 3 * maxBytes)), firstUse: first, lastUse: first + randInt(r, 0, 12) };
  });
}

t.test('Pisarchyk & Lee 2020 example plans to 124 bytes, its lower bound', async (t) => {
  const intervals = [
    [0, 1, 32],
    [1, 4, 28],
    [2, 5, 36],
    [3, 5, 16],
    [4, 5, 8],
    [5, 7, 64],
    [6, 8, 10],
    [7, 8, 40],
  ] as const;
  const p = plan(
    intervals.map(([f, l, s], i) => ({ name: `t${i}`, bytes: s, firstUse: f, lastUse: l })),
    { alignment: 1 },
  );
  t.equal(p.lowerBound, 124);
  t.equal(p.highWater, 124);
  t.equal(p.ratio, 1);
  t.ok(Object.isFrozen(p) && Object.isFrozen(p.buffers) && Object.isFrozen(p.buffers[0]), 'the plan is frozen');
});

t.test('seeded random sets: never an overlap, never below the lower bound', async (t) => {
  let worst = 1;
  let sum = 0;
  const sets = 2000;
  for (let s = 0; s < sets; s++) {
    const n = 2 + (s % 60);
    const alignment = [1, 16, 64, 4096][s % 4]!;
    const specs = randomSet(s, n, n, 64 << 20);
    const p = plan(specs, { alignment });
    if (checkNoOverlap(p.buffers, alignment) !== null || (s % 10 === 0 && bruteForceOverlap(p.buffers) !== null)) {
      t.fail(`set ${s}: overlap`);
      return;
    }
    if (p.highWater < p.lowerBound || p.highWater > p.greedyHighWater) {
      t.fail(`set ${s}: high-water ${p.highWater}, lower bound ${p.lowerBound}, greedy ${p.greedyHighWater}`);
      return;
    }
    for (const b of p.buffers) {
      if (b.offset + b.bytes > p.highWater) {
        t.fail(`set ${s}: ${b.name} ends past the high-water`);
        return;
      }
    }
    worst = Math.max(worst, p.ratio);
    sum += p.ratio;
  }
  t.pass(`${sets} sets safe; mean ratio ${(sum / sets).toFixed(4)}, max ${worst.toFixed(4)}`);
  t.ok(sum / sets <= 1.03, 'mean ratio within 1.03');
  t.ok(worst <= 1.1, 'max ratio within 1.10');
});

t.test('chains and fully-overlapping sets hit the lower bound exactly', async (t) => {
  const r = prng(3);
  for (let s = 0; s < 200; s++) {
    const n = randInt(r, 1, 40);
    const chain = Array.from({ length: n }, (_, i) => ({ name: `c${i}`, bytes: randInt(r, 1, 1 << 20), firstUse: i, lastUse: i + 1 }));
    const pc = plan(chain, { alignment: 64 });
    t.equal(pc.highWater, pc.lowerBound, `chain of ${n}`, { diagnostic: false });
    const full = Array.from({ length: n }, (_, i) => ({ name: `f${i}`, bytes: randInt(r, 1, 1 << 20), firstUse: 0, lastUse: 5 }));
    const pf = plan(full, { alignment: 64 });
    t.equal(pf.highWater, pf.lowerBound, `fully overlapping ${n}`, { diagnostic: false });
  }
});

t.test('deterministic for the same input', async (t) => {
  const specs = randomSet(99, 300, 100, 1 << 24);
  const a = plan(specs);
  const b = plan(specs);
  t.same(a.buffers, b.buffers);
  t.equal(a.highWater, b.highWater);
});

t.test('in place: accepted under the rules, refused otherwise', async (t) => {
  const base: BufferSpec[] = [
    { name: 'x', bytes: 4096, firstUse: 0, lastUse: 1 },
    { name: 'y', bytes: 4096, firstUse: 1, lastUse: 2, inPlaceOf: 'x' },
    { name: 'z', bytes: 1000, firstUse: 2, lastUse: 3 },
  ];
  const ok = plan(base);
  const x = ok.buffers.find((b) => b.name === 'x')!;
  const y = ok.buffers.find((b) => b.name === 'y')!;
  t.equal(y.offset, x.offset, 'y takes x bytes');
  t.equal(y.inPlaceOf, 'x');
  t.same(ok.refusedInPlace, []);
  t.equal(ok.highWater, 4096 + 1024);

  const cases: [string, Partial<BufferSpec>, Partial<BufferSpec>, RegExp][] = [
    ['two consumers', { consumers: 2 }, {}, /2 consumers/],
    ['different size', {}, { bytes: 2048 }, /size differs/],
    ['an output', { output: true }, {}, /is an output/],
    ['different layout', { layout: 'f32[T][512]' }, { layout: 'f16[T][512]' }, /layout differs/],
    ['not the consuming op', { lastUse: 2 }, {}, /last used at op 2/],
    ['whole pass', { wholePass: true }, {}, /whole pass/],
  ];
  for (const [what, xs, ys, reason] of cases) {
    const specs = [{ ...base[0]!, ...xs }, { ...base[1]!, ...ys }, base[2]!];
    const p = plan(specs);
    t.equal(p.refusedInPlace.length, 1, `${what}: refused`);
    t.match(p.refusedInPlace[0]!.reason, reason);
    const px = p.buffers.find((b) => b.name === 'x')!;
    const py = p.buffers.find((b) => b.name === 'y')!;
    t.equal(py.inPlaceOf, null);
    t.ok(px.offset + px.bytes <= py.offset || py.offset + py.bytes <= px.offset, `${what}: planned apart`);
  }
  const missing = plan([{ name: 'a', bytes: 8, firstUse: 0, lastUse: 1, inPlaceOf: 'ghost' }]);
  t.match(missing.refusedInPlace[0]!.reason, /no buffer named 'ghost'/);
  const twice = plan([...base, { name: 'w', bytes: 4096, firstUse: 1, lastUse: 2, inPlaceOf: 'x' }]);
  t.match(twice.refusedInPlace[0]!.reason, /already taken in place/);
});

t.test('whole-pass buffers live from the first to the last op', async (t) => {
  const p = plan([
    { name: 'state', bytes: 64, firstUse: 3, lastUse: 3, wholePass: true },
    { name: 'a', bytes: 64, firstUse: 0, lastUse: 0 },
    { name: 'b', bytes: 64, firstUse: 9, lastUse: 9 },
  ]);
  t.equal(p.lowerBound, 128);
  const s = p.buffers.find((b) => b.name === 'state')!;
  t.same([s.firstUse, s.lastUse], [0, 9]);
});

t.test('bad input names the buffer', async (t) => {
  const ok = { name: 'a', bytes: 1, firstUse: 0, lastUse: 0 };
  t.throws(() => plan([{ ...ok, bytes: -1 }]), /buffer 'a' has bytes -1/);
  t.throws(() => plan([{ ...ok, bytes: 1.5 }]), /buffer 'a' has bytes 1.5/);
  t.throws(() => plan([{ ...ok, firstUse: 2, lastUse: 1 }]), /buffer 'a' has lastUse 1 < firstUse 2/);
  t.throws(() => plan([{ ...ok, firstUse: 0.5 }]), /buffer 'a' has firstUse 0.5/);
  t.throws(() => plan([ok, ok]), /duplicate buffer name 'a'/);
  t.throws(() => plan([{ ...ok, name: '' }]), /buffer 0 needs a non-empty name/);
  t.throws(() => plan([ok], { alignment: 3 }), /alignment must be a power of two/);
  t.throws(() => plan('x' as never), /must be an array/);
});

t.test('the checker catches overlaps the planner would never make', async (t) => {
  const a = { name: 'a', bytes: 64, firstUse: 0, lastUse: 2, offset: 0, inPlaceOf: null };
  t.equal(checkNoOverlap([a, { ...a, name: 'b', offset: 64 }], 64), null);
  t.match(checkNoOverlap([a, { ...a, name: 'b', offset: 0, firstUse: 2, lastUse: 3 }], 64), /'b' .* overlaps 'a'/);
  t.match(checkNoOverlap([a, { ...a, name: 'b', offset: 32 }], 64), /not 64-aligned/);
  t.equal(checkNoOverlap([a, { ...a, name: 'b', offset: 0, firstUse: 3, lastUse: 4 }], 64), null, 'disjoint in time');
});

t.test('an arena carved from a plan: carved equals high-water, views at planned offsets', async (t) => {
  const { MemoryDomain } = await import('../../src/memory/index.js');
  const domain = MemoryDomain.create({ limit: '1GiB', policy: { redZone: 16 } });
  const owner = domain.owner('ticket', 0);
  const specs = randomSet(5, 200, 60, 1 << 16).map((b) => ({ ...b, bytes: b.bytes * 4 }));
  const p = plan(specs);
  const arena = domain.createArena(owner, 'planned', { bytes: domain.policy.arenaBytes([p.highWater]) });
  const carved = arena.carvePlan('conformer', 'scratch', p, { b0: Int32Array });
  t.equal(carved.summary.carved, p.highWater, 'carved bytes equal the high-water');
  t.equal(carved.region.bytes, p.highWater);
  const o = domain.snapshot().owners[0]!;
  t.same(o.categories.scratch, { requested: p.highWater, footprint: carved.region.footprint, regions: 1 }, 'charged once, at the high-water');
  t.type(carved.views.b0, Int32Array);
  t.type(carved.views.b1, Float32Array);
  for (const b of p.buffers) {
    const v = carved.views[b.name]!;
    t.equal(v.byteOffset, arena.base + carved.region.offset + b.offset, `${b.name} at its offset`, { diagnostic: false });
    t.equal(v.byteLength, b.bytes, { diagnostic: false });
  }
  // Run the pass: each op fills the buffers it produces with their own tag and checks that
  // every live buffer still holds its tag. Aliasing of live buffers would break a tag.
  const maxOp = Math.max(...p.buffers.map((b) => b.lastUse));
  let broken = 0;
  for (let op = 0; op <= maxOp; op++) {
    p.buffers.forEach((b, i) => {
      if (b.firstUse === op) new Uint8Array(carved.views[b.name]!.buffer, carved.views[b.name]!.byteOffset, b.bytes).fill((i % 251) + 1);
    });
    p.buffers.forEach((b, i) => {
      if (b.firstUse <= op && op <= b.lastUse) {
        const u = new Uint8Array(carved.views[b.name]!.buffer, carved.views[b.name]!.byteOffset, b.bytes);
        if (u.some((x) => x !== (i % 251) + 1)) broken++;
      }
    });
  }
  t.equal(broken, 0, 'no live buffer was overwritten by another');
  arena.assertRedZones();
  t.throws(() => arena.carvePlan('x', 'scratch', p, { nope: Float32Array }), /has no buffer 'nope'/);
  t.throws(() => arena.carvePlan('y', 'scratch', plan(specs, { alignment: 4096 })), /aligned to 4096 bytes/);
});
