import t from 'tap';
import {
  AllocationError,
  CountingAllocator,
  MEMORY_LIMIT_ENV,
  MemoryDomain,
  MemoryLimitError,
  type MemorySnapshot,
  type PageLocker,
  limitFromEnvironment,
  parseByteSize,
} from '../../src/memory/index.js';

/** Everything a refusal or a failed allocation must leave untouched. */
function held(s: MemorySnapshot): unknown {
  return {
    held: s.held,
    reserved: s.reserved,
    peak: s.peak,
    liveSlabs: s.liveSlabs,
    beforeReadiness: s.allocations.beforeReadiness,
    owners: s.owners,
  };
}

t.test('a refusal by the cap never calls the allocator and changes nothing held', async (t) => {
  const allocator = new CountingAllocator();
  const domain = MemoryDomain.create({ limit: 1 << 20, allocator });
  const owner = domain.owner('conversation', 0);
  const slab = domain.createSlab(owner, 600_000);
  t.equal(allocator.calls, 1);
  const before = domain.snapshot();
  const err = t.throws(() => domain.createSlab(owner, 600_000)) as MemoryLimitError;
  t.type(err, MemoryLimitError);
  t.equal(err.requested, 602_112, 'requested is the page-rounded footprint');
  t.equal(err.inUse, 602_112);
  t.equal(err.limit, 1 << 20);
  t.equal(err.owner, 'conversation/0');
  t.equal(err.exitCode, 3);
  t.match(err.message, /refused 602112 bytes for owner 'conversation\/0'.*602112 bytes in use.*1048576-byte limit/);
  t.equal(allocator.calls, 1, 'the allocator was not called');
  const after = domain.snapshot();
  t.same(held(after), held(before), 'usage and peak byte-for-byte unchanged');
  t.equal(after.allocations.refusals, before.allocations.refusals + 1, 'the refusal is counted');
  domain.releaseSlab(slab);
});

t.test('an allocator failure refunds its reservation exactly', async (t) => {
  const allocator = new CountingAllocator();
  const domain = MemoryDomain.create({ limit: '64MiB', allocator });
  const owner = domain.owner('model');
  const keep = domain.createSlab(owner, 3 << 20);
  const before = domain.snapshot();
  allocator.failNext(1);
  const err = t.throws(() => domain.createSlab(owner, 5 << 20)) as AllocationError;
  t.type(err, AllocationError);
  t.match(err.message, /allocating slab .* for 'model\/0' failed/);
  t.match(String((err.cause as Error).message), /injected allocation failure/);
  t.equal(allocator.calls, 2, 'the allocator was called once more and failed');
  const after = domain.snapshot();
  t.same(held(after), held(before), 'usage and peak byte-for-byte unchanged');
  t.equal(after.reserved, 0, 'nothing stays reserved');
  t.equal(after.allocations.allocatorFailures, 1);
  // The refunded bytes are usable again: the cap is not leaking.
  const again = domain.createSlab(owner, 60 << 20);
  t.equal(domain.snapshot().held.total, (3 << 20) + (60 << 20));
  domain.releaseSlab(again);
  domain.releaseSlab(keep);
  t.equal(domain.snapshot().held.total, 0);
});

t.test('an allocator that returns garbage is a failure, refunded', async (t) => {
  const domain = MemoryDomain.create({
    limit: '1MiB',
    allocator: { allocate: () => new ArrayBuffer(4096) as unknown as SharedArrayBuffer },
  });
  const owner = domain.owner('session');
  t.throws(() => domain.createSlab(owner, 4096), { name: 'AllocationError', cause: { message: /no SharedArrayBuffer/ } });
  t.equal(domain.snapshot().reserved, 0);
  const short = MemoryDomain.create({ limit: '1MiB', allocator: { allocate: () => new SharedArrayBuffer(16) } });
  t.throws(() => short.createSlab(short.owner('session'), 4096), { cause: { message: /16 bytes/ } });
  t.equal(short.snapshot().reserved, 0);
});

t.test('repeated failures and refusals never drift the counters', async (t) => {
  const allocator = new CountingAllocator().failWhen((_bytes, call) => call % 3 === 0);
  const domain = MemoryDomain.create({ limit: 10 * 4096, allocator });
  const owner = domain.owner('ticket', 1);
  const slabs = [];
  let refused = 0;
  let failed = 0;
  for (let i = 0; i < 100; i++) {
    try {
      slabs.push(domain.createSlab(owner, 4096 * (1 + (i % 4))));
    } catch (e) {
      if (e instanceof MemoryLimitError) refused++;
      else if (e instanceof AllocationError) failed++;
      else throw e;
    }
    const s = domain.snapshot();
    t.ok(s.held.total + s.reserved <= s.limit, 'never above the cap', { diagnostic: false });
    if (slabs.length > 3) domain.releaseSlab(slabs.shift()!);
  }
  t.ok(refused > 0 && failed > 0, `both paths exercised (${refused} refused, ${failed} failed)`);
  for (const s of slabs) domain.releaseSlab(s);
  const s = domain.snapshot();
  t.same([s.held.total, s.reserved, s.liveSlabs], [0, 0, 0]);
  t.equal(s.allocations.refusals, refused);
  t.equal(s.allocations.allocatorFailures, failed);
});

t.test('pinned slabs count as pinned bytes; a failed lock refunds', async (t) => {
  const domain = MemoryDomain.create({ limit: '8MiB' });
  const owner = domain.owner('session');
  const pinned = domain.createSlab(owner, 1 << 20, { pinned: true });
  const plain = domain.createSlab(owner, 1 << 20);
  let s = domain.snapshot();
  t.equal(s.held.pinned, 1 << 20);
  t.equal(s.held.slab, 1 << 20);
  t.equal(s.held.total, 2 << 20, 'the cap covers their sum');
  t.throws(() => domain.createSlab(owner, (6 << 20) + 1, { pinned: true }), MemoryLimitError, 'the sum is capped');
  domain.releaseSlab(pinned);
  domain.releaseSlab(plain);

  const refusingLocker: PageLocker = {
    lock: () => ({ ok: false, errno: 12, message: 'Cannot allocate memory' }),
    unlock: () => ({ ok: true, errno: 0, message: '' }),
  };
  const d2 = MemoryDomain.create({ limit: '8MiB', pageLocker: refusingLocker });
  t.throws(() => d2.createSlab(d2.owner('session'), 4096, { pinned: true }), {
    name: 'AllocationError',
    message: /locking slab .* failed: Cannot allocate memory \(errno 12\)/,
  });
  s = d2.snapshot();
  t.same([s.held.total, s.reserved, s.peak], [0, 0, 0]);
});

t.test('the cap comes from the API or VOXSLAB_MEMORY_LIMIT', async (t) => {
  t.equal(parseByteSize('512MiB'), 512 * 1024 * 1024);
  t.equal(parseByteSize('2GiB'), 2 * 1024 ** 3);
  t.equal(parseByteSize('1048576'), 1048576);
  t.equal(parseByteSize('1.5KiB'), 1536);
  t.equal(parseByteSize('3 MB'), 3_000_000);
  t.equal(limitFromEnvironment(77, {}), 77);
  t.equal(limitFromEnvironment(77, { [MEMORY_LIMIT_ENV]: '' }), 77);
  t.equal(limitFromEnvironment(77, { [MEMORY_LIMIT_ENV]: '2GiB' }), 2 * 1024 ** 3);
  for (const bad of ['lots', '12 parsecs', '-5MiB', '0.5', '0', '1e3', '99999999999TiB']) {
    t.throws(
      () => limitFromEnvironment(77, { [MEMORY_LIMIT_ENV]: bad }),
      { name: 'BadInputError', message: /VOXSLAB_MEMORY_LIMIT/, exitCode: 4 },
      `'${bad}' is refused`,
    );
  }
  const saved = process.env[MEMORY_LIMIT_ENV];
  process.env[MEMORY_LIMIT_ENV] = '3MiB';
  try {
    t.equal(MemoryDomain.create().limit.limit, 3 << 20, 'the environment sets the default cap');
    t.equal(MemoryDomain.create({ limit: '5MiB' }).limit.limit, 5 << 20, 'the API overrides it');
  } finally {
    if (saved === undefined) delete process.env[MEMORY_LIMIT_ENV];
    else process.env[MEMORY_LIMIT_ENV] = saved;
  }
  t.throws(() => MemoryDomain.create({ limit: 0 }), /must be positive/);
  t.throws(() => MemoryDomain.create({ limit: -1 }), /negative/);
  t.throws(() => MemoryDomain.create({ limt: 5 } as never), /unknown option 'limt'/);
  t.throws(() => MemoryDomain.create({ allocator: {} as never }), /allocate\(bytes\)/);
});
