/**
 * `voxslab bench memory`: cost of the shared accounting.
 *  - reserve+commit+release and reserve+refund per operation, one thread vs two contending;
 *  - coherent snapshot cost as the number of owners grows.
 * Each figure is reported beside a peer measured in the same run: a bare Atomics.add on one
 * shared counter (the least any cross-thread accounting can cost), and a plain copy of the
 * same counter words (the least any snapshot can cost).
 */
import { availableParallelism } from 'node:os';
import { kGlobalSlots, kOwnerSlots, MemoryDomain, type Owner, OWNER_KINDS, type OwnerKind } from '../src/memory/index.js';
import { nsPerOp, round, runWorker } from './util.js';

const OP_BYTES = 4096;

/** reserve → commit → release, n times. Shared with the contending worker. */
export function cycleCommit(domain: MemoryDomain, owner: Owner, n: number): void {
  const limit = domain.limit;
  for (let i = 0; i < n; i++) {
    limit.reserve(owner, OP_BYTES);
    limit.commit(owner, 'slab', OP_BYTES);
    limit.release(owner, 'slab', OP_BYTES);
  }
}

/** reserve → refund, n times. */
export function cycleRefund(domain: MemoryDomain, owner: Owner, n: number): void {
  const limit = domain.limit;
  for (let i = 0; i < n; i++) {
    limit.reserve(owner, OP_BYTES);
    limit.refund(OP_BYTES);
  }
}

export interface MemoryBenchResult {
  bench: 'memory';
  cpus: number;
  peer: { atomicsAddNs: number; plainCopyNsPerOwner: number };
  oneThread: { commitCycleNs: number; refundCycleNs: number };
  twoThreads: { commitCycleNs: number; refundCycleNs: number; slowdown: number };
  ratios: { commitCycleVsAtomicsAdd: number; refundCycleVsAtomicsAdd: number };
  snapshots: { owners: number; rawNs: number; decodedNs: number; rawVsPlainCopy: number }[];
}

export async function run(options: { quick?: boolean } = {}): Promise<MemoryBenchResult> {
  const n = options.quick === true ? 20_000 : 200_000;
  const repeats = options.quick === true ? 3 : 5;

  // Peer: one bare atomic add on a shared word.
  const word = new Int32Array(new SharedArrayBuffer(4));
  const atomicsAddNs = nsPerOp(n, repeats, (k) => {
    for (let i = 0; i < k; i++) Atomics.add(word, 0, 1);
  });

  const domain = MemoryDomain.create({ limit: '1TiB' });
  const owner = domain.owner('ticket', 0);
  const commitCycleNs = nsPerOp(n, repeats, (k) => cycleCommit(domain, owner, k));
  const refundCycleNs = nsPerOp(n, repeats, (k) => cycleRefund(domain, owner, k));

  // Two threads contending on the same counters.
  const control = new SharedArrayBuffer(8);
  const c = new Int32Array(control);
  const url = new URL('./workers/contend.js', import.meta.url);
  const workers = [0, 1].map((id) => runWorker<{ commitNs: number; refundNs: number }>(url, { shared: domain.share(), control, id: id + 1, n }));
  while (Atomics.load(c, 0) < 2) Atomics.wait(c, 0, Atomics.load(c, 0), 50);
  Atomics.store(c, 1, 1);
  Atomics.notify(c, 1);
  const results = await Promise.all(workers.map((w) => w.done));
  await Promise.all(workers.map((w) => w.worker.terminate()));
  const two = {
    commitCycleNs: (results[0]!.commitNs + results[1]!.commitNs) / 2,
    refundCycleNs: (results[0]!.refundNs + results[1]!.refundNs) / 2,
  };

  // Snapshot cost vs owners.
  const snapshots: MemoryBenchResult['snapshots'] = [];
  let plainCopyNsPerOwner = 0;
  for (const owners of [1, 4, 16, 64]) {
    const d = MemoryDomain.create({ limit: '1TiB' });
    for (let i = 0; i < owners; i++) {
      const kind = OWNER_KINDS[i % OWNER_KINDS.length] as OwnerKind;
      const o = d.owner(kind, Math.floor(i / OWNER_KINDS.length));
      d.limit.reserve(o, OP_BYTES);
      d.limit.commit(o, 'slab', OP_BYTES);
      d.ledger.charge(o, 'scratch', 100, 128);
    }
    const raw = new Float64Array(d.ledger.counters.count);
    const m = Math.max(2000, Math.floor(n / (owners * 4)));
    const rawNs = nsPerOp(m, repeats, (k) => {
      for (let i = 0; i < k; i++) d.ledger.readRaw(raw);
    });
    const decodedNs = nsPerOp(Math.max(500, m >> 2), repeats, (k) => {
      for (let i = 0; i < k; i++) d.snapshot();
    });
    // Peer: copy the same counter words without any synchronisation.
    const live = 2 * (kGlobalSlots + owners * kOwnerSlots);
    const words = new Uint32Array(d.ledger.counters.buffer, 16, live);
    const copy = new Uint32Array(live);
    const plainNs = nsPerOp(m, repeats, (k) => {
      for (let i = 0; i < k; i++) copy.set(words);
    });
    plainCopyNsPerOwner = plainNs / owners;
    snapshots.push({ owners, rawNs: round(rawNs), decodedNs: round(decodedNs), rawVsPlainCopy: round(rawNs / plainNs, 2) });
  }

  return {
    bench: 'memory',
    cpus: availableParallelism(),
    peer: { atomicsAddNs: round(atomicsAddNs, 2), plainCopyNsPerOwner: round(plainCopyNsPerOwner, 2) },
    oneThread: { commitCycleNs: round(commitCycleNs), refundCycleNs: round(refundCycleNs) },
    twoThreads: {
      ...{ commitCycleNs: round(two.commitCycleNs), refundCycleNs: round(two.refundCycleNs) },
      slowdown: round(two.commitCycleNs / commitCycleNs, 2),
    },
    ratios: {
      commitCycleVsAtomicsAdd: round(commitCycleNs / atomicsAddNs, 1),
      refundCycleVsAtomicsAdd: round(refundCycleNs / atomicsAddNs, 1),
    },
    snapshots,
  };
}

export function format(r: MemoryBenchResult): string {
  const lines = [
    `memory accounting (${r.cpus} CPUs)`,
    `  peer: Atomics.add on one shared word            ${r.peer.atomicsAddNs} ns`,
    `  reserve+commit+release, one thread              ${r.oneThread.commitCycleNs} ns  (${r.ratios.commitCycleVsAtomicsAdd}× Atomics.add)`,
    `  reserve+refund, one thread                      ${r.oneThread.refundCycleNs} ns  (${r.ratios.refundCycleVsAtomicsAdd}× Atomics.add)`,
    `  reserve+commit+release, two threads contending  ${r.twoThreads.commitCycleNs} ns per thread (${r.twoThreads.slowdown}× one thread)`,
    `  reserve+refund, two threads contending          ${r.twoThreads.refundCycleNs} ns per thread`,
    '  coherent snapshot:  owners   raw read   decoded   raw ÷ unsynchronised copy',
  ];
  for (const s of r.snapshots) {
    lines.push(
      `                      ${String(s.owners).padStart(6)} ${String(s.rawNs).padStart(8)} ns ${String(s.decodedNs).padStart(8)} ns   ${s.rawVsPlainCopy}×`,
    );
  }
  return lines.join('\n');
}
