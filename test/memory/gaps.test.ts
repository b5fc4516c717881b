// Cap and readiness gaps an audit found: each reproduction fails without its fix.
import t from 'tap';
import { AllocationError, MemoryDomain, ReadinessError, type Owner } from '../../src/memory/index.js';

const ok = { ok: true, errno: 0, message: '' };

function state(d: MemoryDomain): { held: number; reserved: number; slabs: number; after: number } {
  const s = d.snapshot();
  return { held: s.held.total, reserved: s.reserved, slabs: s.liveSlabs, after: s.allocations.afterReadiness.attempts };
}

t.test('a page locker that throws leaves no reservation behind', async (t) => {
  const d = MemoryDomain.create({
    limit: '16MiB',
    pageLocker: {
      lock: () => {
        throw new Error('locker exploded');
      },
      unlock: () => ok,
    },
  });
  const o = d.owner('model');
  t.throws(() => d.createSlab(o, 65536, { pinned: true }), AllocationError);
  t.same(state(d), { held: 0, reserved: 0, slabs: 0, after: 0 });
  t.ok(d.createSlab(o, 65536), 'the cap is whole: the next slab is admitted');
});

t.test('an allocator that returns more than asked is refused (the extra bytes would be uncounted)', async (t) => {
  const d = MemoryDomain.create({ limit: '16MiB', allocator: { allocate: (n: number) => new SharedArrayBuffer(n * 2) } });
  t.throws(() => d.createSlab(d.owner('model'), 65536), /allocator returned 131072 bytes for 65536/);
  t.same(state(d), { held: 0, reserved: 0, slabs: 0, after: 0 });
});

t.test('sealing an owner seals the arenas it already has', async (t) => {
  const d = MemoryDomain.create({ limit: '16MiB' });
  const o = d.owner('conversation', 3);
  const a = d.createArena(o, 'state', { bytes: 1 << 16 });
  a.carve('before', 'metadata', Float32Array, 16);
  d.ledger.seal(o);
  t.throws(() => a.carve('after', 'metadata', Float32Array, 16), ReadinessError);
  t.equal(state(d).after, 1, 'the refused carve is counted');
});

t.test('an owner sealed while its slab is being allocated: refused and counted, nothing held', async (t) => {
  let sealMe: Owner | null = null;
  let d: MemoryDomain | null = null;
  d = MemoryDomain.create({
    limit: '16MiB',
    allocator: {
      allocate(n: number) {
        // Another thread seals the owner between the reservation and the commit.
        if (sealMe !== null) d!.ledger.seal(sealMe);
        return new SharedArrayBuffer(n);
      },
    },
  });
  const o = d.owner('conversation', 1);
  sealMe = o;
  t.throws(() => d!.createSlab(o, 65536), ReadinessError);
  t.same(state(d), { held: 0, reserved: 0, slabs: 0, after: 1 });
  // Sealed before the call: refused in the reservation's own write section.
  t.throws(() => d!.createSlab(o, 65536), ReadinessError);
  t.same(state(d), { held: 0, reserved: 0, slabs: 0, after: 2 });
});
