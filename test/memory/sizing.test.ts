import t from 'tap';
import { CountingAllocator, MemoryDomain } from '../../src/memory/index.js';
import { sizedArenas } from '../../src/memory/sizing.js';
import { installConstructorTrap } from '../../src/runtime/trap.js';

t.test('the sizing dry run allocates no slab: only the real arenas reach an allocator, inside the cap', async (t) => {
  const allocator = new CountingAllocator();
  const domain = MemoryDomain.create({ limit: '64MiB', allocator });
  const owner = domain.owner('ticket', 0);
  const trap = installConstructorTrap();
  let dryBig = -1;
  let out: { value: Float32Array; used: number };
  try {
    const { value, arenas } = sizedArenas(domain, [{ owner, name: 'scratch' }], 1 << 30, ([a]) => {
      const big = a!.carve('big', 'scratch', Float32Array, 4_000_000); // 16 MB, never filled here
      const table = a!.carve('table', 'derived', Float64Array, 256); // filled at construction
      for (let i = 0; i < table.length; i++) table[i] = Math.sin(i);
      if (!a!.backed) dryBig = big.length;
      return big;
    });
    out = { value, used: arenas[0]!.used };
  } finally {
    trap.uninstall();
  }
  t.equal(allocator.calls, 1, 'one allocator call: the real arena');
  t.equal(trap.countOf('SharedArrayBuffer'), 2, 'two SharedArrayBuffers in all: the dry run’s small ledger block and the real arena (no dry-run slab)');
  t.equal(dryBig, 0, 'the dry run’s 16 MB region had an empty view (sized, not backed)');
  t.equal(out.value.length, 4_000_000, 'the real region has its full view');
  t.ok(domain.snapshot().held.total < 20 * 2 ** 20, `the cap holds only the real arena (${domain.snapshot().held.total} bytes; the dry run's bound was 1 GiB)`);
  t.ok(out.used >= 16_000_000 + 2048, `arena sized exactly by the dry run (${out.used} bytes carved)`);
});

t.test('an unbacked arena charges and offsets exactly as a backed one', async (t) => {
  const domain = MemoryDomain.create({ limit: '1GiB', policy: { redZone: 64 } });
  const real = domain.createArena(domain.owner('conversation', 0), 'real', { bytes: 1 << 20 });
  const dry = domain.createUnbackedArena(domain.owner('conversation', 1), 'dry', 1 << 20);
  for (const a of [real, dry]) {
    a.carve('a', 'recurrence', Float32Array, 1000);
    a.carve('b', 'scratch', Uint8Array, 3);
    a.carve('c', 'metadata', Int32Array, 77);
  }
  t.same(dry.regions, real.regions, 'the same regions at the same offsets');
  t.equal(dry.used, real.used);
  const m = domain.manifest({ measureResident: false });
  t.same(m.owners['conversation/1']!.categories, m.owners['conversation/0']!.categories, 'the same charges per category');
  t.equal(dry.checkRedZones(), null, 'an unbacked arena has no canaries to check');
});

t.test('a sizing that fails on the real pass leaves nothing held', async (t) => {
  const domain = MemoryDomain.create({ limit: '64MiB' });
  const owners = [domain.owner('conversation', 0), domain.owner('conversation', 1)];
  const held = () => domain.snapshot().held.total;
  const before = held();
  let pass = 0;
  t.throws(
    () =>
      sizedArenas(
        domain,
        owners.map((owner, i) => ({ owner, name: `state ${i}` })),
        1 << 24,
        (arenas) => {
          for (const a of arenas) a.carve('x', 'recurrence', Float32Array, 1000);
          if (++pass === 2) throw new Error('the build failed on the real arenas');
          return null;
        },
      ),
    /the build failed/,
  );
  t.equal(held(), before, 'both real arenas were released');
  // A refusal by the cap on the second arena releases the first.
  const small = MemoryDomain.create({ limit: 6 * 2 ** 20 });
  const h0 = small.snapshot().held.total;
  t.throws(
    () =>
      sizedArenas(
        small,
        [0, 1].map((i) => ({ owner: small.owner('conversation', i), name: `big ${i}` })),
        1 << 24,
        (arenas) => arenas.map((a) => a.carve('x', 'recurrence', Float32Array, 1 << 20)),
      ),
    { name: 'MemoryLimitError' },
  );
  t.equal(small.snapshot().held.total, h0, 'the first arena was released when the second was refused');
});
