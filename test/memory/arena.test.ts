import t from 'tap';
import { MemoryDomain, ReadinessError, canaryByte, registerCategories } from '../../src/memory/index.js';

t.test('red zones catch a one-byte overrun at every boundary', async (t) => {
  const domain = MemoryDomain.create({ limit: '16MiB', policy: { redZone: 8, alignment: 64 } });
  const owner = domain.owner('ticket', 0);
  const lengths = [1, 63, 64, 65, 200, 0, 1000];
  const arena = domain.createArena(owner, 'guarded', { bytes: domain.policy.arenaBytes(lengths) });
  const views = lengths.map((n, i) => arena.carve(`r${i}`, 'scratch', Uint8Array, n));
  t.equal(arena.checkRedZones(), null, 'fresh arena is intact');
  for (const v of views) v.fill(0xee);
  t.equal(arena.checkRedZones(), null, 'writes inside the regions are fine');
  const raw = new Uint8Array(arena.slab.buffer);
  // One byte past each region's end, and one byte before the first region.
  const probes: { at: number; before: string; after: string }[] = [{ at: views[0]!.byteOffset - 1, before: '(arena start)', after: 'r0' }];
  views.forEach((v, i) => {
    probes.push({ at: v.byteOffset + v.byteLength, before: `r${i}`, after: i + 1 < views.length ? `r${i + 1}` : '(end of carved space)' });
  });
  for (const p of probes) {
    const saved = raw[p.at]!;
    raw[p.at] = saved ^ 0x5a;
    const fault = arena.checkRedZones();
    t.same(
      fault && { before: fault.before, after: fault.after, offset: fault.offset },
      { before: p.before, after: p.after, offset: p.at },
      `overrun at ${p.at} (${p.before} | ${p.after})`,
    );
    t.throws(() => arena.assertRedZones(), { name: 'CorruptionError', message: new RegExp(`between '${p.before.replace(/[()]/g, '\\$&')}' and`) });
    raw[p.at] = saved;
  }
  t.equal(arena.checkRedZones(), null, 'restored');
  t.equal(raw[arena.base], canaryByte(arena.base), 'the leading guard starts at the base');
});

t.test('a sealed arena refuses and counts a post-readiness carve', async (t) => {
  const domain = MemoryDomain.create({ limit: '16MiB' });
  const owner = domain.owner('conversation', 3);
  const arena = domain.createArena(owner, 'state', { bytes: 4096 });
  const a = arena.carve('a', 'recurrence', Float32Array, 16);
  arena.seal();
  const before = domain.snapshot();
  t.throws(() => arena.carve('b', 'recurrence', Float32Array, 16), ReadinessError);
  t.throws(() => arena.carve('c', 'scratch', Uint8Array, 100), /sealed \(ready\).*'c'/);
  const after = domain.snapshot();
  t.equal(after.allocations.afterReadiness.attempts, before.allocations.afterReadiness.attempts + 2);
  t.equal(after.allocations.afterReadiness.bytes, before.allocations.afterReadiness.bytes + 64 + 128);
  t.same(after.owners, before.owners, 'nothing was charged');
  a[0] = 1;
  t.equal(a[0], 1, 'earlier views still work');

  domain.ledger.seal(owner);
  t.throws(() => domain.createSlab(owner, 4096), { name: 'ReadinessError', message: /'conversation\/3' is ready/ });
  t.equal(domain.snapshot().allocations.afterReadiness.attempts, before.allocations.afterReadiness.attempts + 3);
  t.equal(domain.snapshot().liveSlabs, 1, 'the refused slab was never made');
});

t.test('carving charges categories; release returns every byte', async (t) => {
  const domain = MemoryDomain.create({ limit: '16MiB' });
  const owner = domain.owner('conversation', 0);
  const arena = domain.createArena(owner, 'conv', { bytes: 100_000 });
  arena.carve('kv', 'recurrence', Float32Array, 10_000);
  arena.carve('conv', 'recurrence', Float32Array, 100);
  // Memory knows only its own categories; a layer registers the ones it owns.
  t.throws(() => arena.carve('sampler', 'test.sampler', Int32Array, 10), /not a region category/);
  registerCategories(['test.sampler']);
  arena.carve('sampler', 'test.sampler', Int32Array, 10);
  const s = domain.snapshot();
  const o = s.owners.find((x) => x.name === 'conversation/0')!;
  t.same(o.categories.recurrence, { requested: 40_400, footprint: 40_000 + 448, regions: 2 });
  t.same(o.categories['test.sampler'], { requested: 40, footprint: 64, regions: 1 });
  const sum = Object.values(o.categories).reduce((a, c) => a + c.footprint, 0);
  t.equal(sum, o.held, 'categories (with slack) sum to the owner');
  t.equal(o.held, arena.capacity);
  t.throws(() => arena.carve('kv', 'recurrence', Uint8Array, 1), /carved already/);
  t.throws(() => arena.carve('big', 'scratch', Uint8Array, 1 << 20), { name: 'AllocationError', message: /needs .* bytes but .* are left/ });
  t.throws(() => arena.carve('x', 'slack' as never, Uint8Array, 1), /not a region category/);
  t.throws(() => arena.carve('x', 'bogus' as never, Uint8Array, 1), /not a region category/);
  t.throws(() => arena.carve('', 'scratch', Uint8Array, 1), /non-empty/);
  t.throws(() => arena.carve('x', 'scratch', Uint8Array, -4), /negative/);
  arena.release();
  arena.release();
  const z = domain.snapshot();
  t.equal(z.held.total, 0);
  t.same(z.owners[0]!.categories, {}, 'every category back to zero');
});
