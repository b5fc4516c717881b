import t from 'tap';
import { MemoryDomain, type MemorySnapshot, kOwnerCount, kOwnerHeld, kPeak, kPinnedHeld, kSlabHeld, ownerBase } from '../../src/memory/index.js';
import { runWorker } from '../helpers.js';
import type { ChurnData, ChurnResult } from './workers/churn.js';

const churn = new URL('./workers/churn.js', import.meta.url);

/**
 * Coherence oracle, written from the definitions rather than from the ledger's code:
 * held ≤ peak, owners sum to the total, each owner's categories sum to what it holds,
 * and nothing exceeds the cap.
 */
function incoherence(s: MemorySnapshot): string | null {
  if (s.held.total > s.peak) return `current ${s.held.total} > peak ${s.peak}`;
  if (s.held.total + s.reserved > s.limit) return `held+reserved ${s.held.total + s.reserved} > limit ${s.limit}`;
  let sum = 0;
  for (const o of s.owners) {
    sum += o.held;
    let cats = 0;
    for (const c of Object.values(o.categories)) cats += c.footprint;
    if (cats !== o.held) return `${o.name}: categories ${cats} ≠ held ${o.held}`;
    if (o.held > o.peak) return `${o.name}: held ${o.held} > peak ${o.peak}`;
  }
  if (sum !== s.held.total) return `owners sum ${sum} ≠ total ${s.held.total}`;
  return null;
}

async function startWorkers(domain: MemoryDomain, n: number, extra: Partial<ChurnData>) {
  const control = new SharedArrayBuffer(12);
  const c = new Int32Array(control);
  const runs = Array.from({ length: n }, (_, id) =>
    runWorker<ChurnResult>(churn, {
      shared: domain.share(),
      control,
      id,
      seed: 1000 + id,
      ops: 0,
      maxBytes: 64 * 1024,
      failRate: 0.05,
      checkEvery: 0,
      ...extra,
    } satisfies ChurnData),
  );
  // Handshake: every worker attached and waiting before any starts.
  while (Atomics.load(c, 0) < n) Atomics.wait(c, 0, Atomics.load(c, 0), 50);
  Atomics.store(c, 1, 1);
  Atomics.notify(c, 1);
  return { runs, stop: () => Atomics.store(c, 2, 1) };
}

t.test('worker threads reserving and freeing concurrently never exceed the cap', async (t) => {
  const limit = 2 * 1024 * 1024;
  const domain = MemoryDomain.create({ limit });
  const start = domain.snapshot();
  const { runs } = await startWorkers(domain, 3, { ops: 4000, checkEvery: 1 });
  let mainSnapshots = 0;
  let mainViolations = 0;
  let settled = false;
  const all = Promise.all(runs).finally(() => {
    settled = true;
  });
  while (!settled) {
    const s = domain.snapshot();
    mainSnapshots++;
    if (incoherence(s) !== null) mainViolations++;
    await new Promise((r) => setImmediate(r));
  }
  const results = await all;
  const total = results.reduce(
    (a, r) => ({
      ops: a.ops + r.ops,
      refused: a.refused + r.refused,
      failed: a.failed + r.failed,
      overCap: a.overCap + r.overCap,
      allocated: a.allocated + r.allocated,
    }),
    { ops: 0, refused: 0, failed: 0, overCap: 0, allocated: 0 },
  );
  t.equal(total.ops, 12000, 'every operation ran');
  t.ok(total.refused > 0, `the cap refused some (${total.refused})`);
  t.ok(total.failed > 0, `the allocator failed some (${total.failed})`);
  t.equal(total.overCap, 0, 'no worker ever saw usage above the cap');
  t.equal(mainViolations, 0, `no incoherent or over-cap snapshot in ${mainSnapshots} main-thread readings`);
  const end = domain.snapshot();
  t.ok(end.peak <= limit, `peak ${end.peak} within the cap`);
  t.same([end.held.total, end.reserved, end.liveSlabs], [start.held.total, start.reserved, start.liveSlabs], 'counters return exactly to their start');
  t.equal(end.allocations.refusals, total.refused);
  t.equal(end.allocations.allocatorFailures, total.failed);
  for (const o of end.owners) t.same([o.held, o.categories], [0, {}], `${o.name} back to zero`);
});

t.test('naive reads are incoherent under load; snapshots never are', async (t) => {
  const domain = MemoryDomain.create({ limit: '256MiB' });
  const { runs, stop } = await startWorkers(domain, 1, { maxBytes: 256 * 1024, failRate: 0 });
  const c = domain.ledger.counters;

  // Negative control: read peak, then each owner, then the total, one counter at a time.
  let naiveReads = 0;
  let incoherent: string | null = null;
  while (incoherent === null && naiveReads < 5_000_000) {
    naiveReads++;
    const peak = c.readOneUnsynchronised(kPeak);
    const owners = c.readOneUnsynchronised(kOwnerCount);
    let sum = 0;
    for (let s = 0; s < owners; s++) sum += c.readOneUnsynchronised(ownerBase(s) + kOwnerHeld);
    const total = c.readOneUnsynchronised(kSlabHeld) + c.readOneUnsynchronised(kPinnedHeld);
    if (total > peak) incoherent = `current ${total} > peak ${peak}`;
    else if (sum !== total) incoherent = `owners sum ${sum} ≠ total ${total}`;
  }
  t.not(incoherent, null, `naive reads saw an incoherent state after ${naiveReads} reads: ${incoherent}`);

  // At least 20,000 snapshots, and on until the worker has changed the state 1,000 times
  // between them (however the scheduler shares the cores), within a bounded number.
  let bad: string | null = null;
  let changes = 0;
  let lastSeq = -1;
  let taken = 0;
  while ((taken < 20_000 || changes < 1_000) && taken < 5_000_000) {
    const s = domain.snapshot();
    taken++;
    if (s.sequence !== lastSeq) changes++;
    lastSeq = s.sequence;
    bad = incoherence(s);
    if (bad !== null) break;
  }
  stop();
  await Promise.all(runs);
  t.equal(bad, null, `${taken} snapshots under the same load are all coherent`);
  t.ok(taken >= 20_000, 'at least 20,000 snapshots');
  t.ok(changes >= 1_000, `the load changed the counters between snapshots (${changes} distinct states)`);
});
