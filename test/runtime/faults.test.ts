import t from 'tap';
import { AllocationError, MemoryLimitError } from '../../src/errors.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { SpeechModel } from '../../src/core/conversation.js';
import { scratchDir } from '../helpers.js';

// Fault injection at every allocation site of model load and conversation open: each site in
// turn is refused by the cap or fails in the allocator. Each time the error is typed and names
// the site, the ledger and the cap are back to where they were, and the next attempt succeeds.
const dir = scratchDir('voxslab-faults-');
makeCheckpoint({ config: 'tiny', seed: 5, out: dir, dtype: 'f32' });

/** An allocator that records every call and fails the `failAt`-th (1-based) after `arm`. */
function injector() {
  const s = { calls: 0, failAt: 0, inUseAtCall: [] as number[], domain: null as MemoryDomain | null };
  const allocator = {
    allocate(n: number): SharedArrayBuffer {
      s.calls++;
      const m = s.domain?.snapshot();
      s.inUseAtCall.push(m === undefined ? 0 : m.held.total + m.reserved);
      if (s.calls === s.failAt) throw new Error(`injected failure at allocation ${s.calls}`);
      return new SharedArrayBuffer(n);
    },
  };
  return {
    s,
    allocator,
    arm(failAt: number) {
      s.calls = 0;
      s.failAt = failAt;
      s.inUseAtCall = [];
    },
  };
}

/** What must come back exactly after a failed attempt. */
const state = (d: MemoryDomain) => {
  const m = d.snapshot();
  return {
    held: m.held.total,
    reserved: m.reserved,
    liveSlabs: m.liveSlabs,
    afterReadiness: m.allocations.afterReadiness.attempts,
    owners: m.owners.filter((o) => o.held > 0).map((o) => `${o.name}:${o.held}`),
  };
};

const SITE = /(allocating|reserving) (slab|arena) '[^']+'|slab '[^']+'|arena '[^']+'/;

t.test('every allocation site of model load, then of conversation open, fails in turn and leaves nothing behind', async (t) => {
  const inj = injector();
  const domain = MemoryDomain.create({ limit: '2GiB', allocator: inj.allocator });
  inj.s.domain = domain;
  const empty = state(domain);

  // A clean load counts the sites.
  inj.arm(0);
  const probe = SpeechModel.load(dir, domain);
  const loadSites = inj.s.calls;
  const loadInUse = [...inj.s.inUseAtCall];
  const loaded = state(domain);
  inj.arm(0);
  probe.conversation({ seed: 1, inputRate: 16000 });
  const openSites = inj.s.calls;
  const openInUse = [...inj.s.inUseAtCall];
  t.ok(loadSites >= 3, `model load allocates at ${loadSites} sites`);
  t.ok(openSites >= 1, `conversation open allocates at ${openSites} sites`);

  // Conversation open: each site fails with the model loaded.
  const afterOpen = state(domain);
  for (let k = 1; k <= openSites; k++) {
    // The probe's conversation holds conversation/0; each attempt opens conversation/1.
    const before = state(domain);
    inj.arm(k);
    const err = (() => {
      try {
        probe.conversation({ seed: 1, inputRate: 16000 });
      } catch (e) {
        return e;
      }
      return null;
    })();
    t.ok(err instanceof AllocationError, `open site ${k}: AllocationError`, { diagnostic: false });
    t.match((err as Error).message, SITE, `open site ${k} is named: ${(err as Error).message.slice(0, 90)}`);
    t.same(state(domain), before, `open site ${k}: ledger and cap back to where they were`, { diagnostic: false });
  }
  inj.arm(0);
  t.doesNotThrow(() => probe.conversation({ seed: 2, inputRate: 16000 }), 'then an open succeeds');
  t.not(state(domain).held, afterOpen.held, 'and holds its bytes');

  // Model load: a fresh domain per attempt so each starts from nothing.
  for (let k = 1; k <= loadSites; k++) {
    const i2 = injector();
    const d2 = MemoryDomain.create({ limit: '2GiB', allocator: i2.allocator });
    i2.arm(k);
    t.throws(() => SpeechModel.load(dir, d2), AllocationError, `load site ${k}: AllocationError`);
    t.same(state(d2), empty, `load site ${k}: nothing held, nothing reserved`, { diagnostic: false });
    i2.arm(0);
    t.doesNotThrow(() => SpeechModel.load(dir, d2), `load site ${k}: the next load succeeds`);
  }

  // The cap refuses each site in turn: a cap one byte short of what that site needs.
  for (const [phase, inUse] of [['load', loadInUse] as const, ['open', openInUse] as const]) {
    for (let k = 0; k < inUse.length; k++) {
      const i3 = injector();
      const d3 = MemoryDomain.create({ limit: '2GiB', allocator: i3.allocator });
      i3.s.domain = d3;
      const m = phase === 'open' ? SpeechModel.load(dir, d3) : null;
      const before = state(d3);
      d3.limit.setLimit(inUse[k]! - (phase === 'open' ? loaded.held : 0) + before.held - 1);
      const err = (() => {
        try {
          if (m === null) SpeechModel.load(dir, d3);
          else m.conversation({ seed: 1, inputRate: 16000 });
        } catch (e) {
          return e;
        }
        return null;
      })();
      t.ok(err instanceof MemoryLimitError, `${phase} site ${k + 1} refused by the cap: MemoryLimitError`, { diagnostic: false });
      t.match((err as Error).message, SITE, `${phase} refusal names the site`, { diagnostic: false });
      t.same(state(d3), before, `${phase} site ${k + 1}: ledger and cap back to where they were`, { diagnostic: false });
      d3.limit.setLimit(2 ** 31);
      t.doesNotThrow(() => (m === null ? SpeechModel.load(dir, d3) : m.conversation({ seed: 1, inputRate: 16000 })), `${phase}: then it succeeds`, {
        diagnostic: false,
      });
    }
  }
  t.same(loaded.afterReadiness, 0);
});

t.test('pipeline start and conversation open: each stage worker fails each of its allocations in turn, and nothing stays held', async (t) => {
  const { Pipeline } = await import('../../src/runtime/coordinator.js');
  const STAGE_NAMES = (await import('../../src/runtime/stages/index.js')).PIPELINE.names;
  const open = { seed: 1, inputRate: 16000 };
  const d = MemoryDomain.create({ limit: '2GiB' });
  const empty = state(d);
  // A clean start and open count each worker's sites.
  const p0 = await Pipeline.start(dir, d, { pin: 'none' });
  const atStart = p0.workers.map((w) => w.slabs.length);
  await p0.open(open);
  const atOpen = p0.workers.map((w, i) => w.slabs.length - atStart[i]!);
  await p0.close();
  t.same(state(d), empty, 'a clean run returns everything');
  t.ok(
    atOpen.every((n) => n >= 1),
    `sites at start per stage: ${STAGE_NAMES.map((s, i) => `${s} ${atStart[i]}`).join(', ')}; at open: ${atOpen.join(', ')}`,
  );
  // Start, main thread: the weights image and the control block, each site in turn.
  const main = injector();
  const dm = MemoryDomain.create({ limit: '2GiB', allocator: main.allocator });
  main.arm(0);
  await (await Pipeline.start(dir, dm, { pin: 'none' })).close();
  const mainSites = main.s.calls;
  for (let k = 1; k <= mainSites; k++) {
    main.arm(k);
    const err = await Pipeline.start(dir, dm, { pin: 'none' }).then(
      () => null,
      (e: unknown) => e as Error,
    );
    t.ok(err instanceof AllocationError, `main-thread start site ${k} of ${mainSites}: AllocationError`, { diagnostic: false });
    t.same(state(dm), empty, `main-thread start site ${k}: nothing held`);
  }
  // Start, stage workers: each site of each stage in turn.
  for (const [i, stage] of STAGE_NAMES.entries()) {
    for (let k = 1; k <= atStart[i]!; k++) {
      const err = await Pipeline.start(dir, d, { pin: 'none', failAllocationAt: { [stage]: k } }).then(
        () => null,
        (e: unknown) => e as Error,
      );
      t.match(err?.message ?? '', /allocating slab '[^']+' .*injected failure/, `${stage} start site ${k}: refused, naming the slab`, { diagnostic: false });
      t.same(state(d), empty, `${stage} start site ${k}: nothing held`);
    }
  }
  // Open: every stage armed at its first open site; the opens fail one stage after the other
  // (a stage is reached only once the ones before it succeeded), then one succeeds.
  const failAllocationAt = Object.fromEntries(STAGE_NAMES.map((s, i) => [s, atStart[i]! + 1]));
  const p = await Pipeline.start(dir, d, { pin: 'none', failAllocationAt });
  const ready = state(d);
  for (const stage of STAGE_NAMES) {
    const err = await p.open(open).then(
      () => null,
      (e: unknown) => e as Error,
    );
    t.match(err?.message ?? '', /allocating slab '[^']+' .*injected failure/, `${stage} open site: refused`, { diagnostic: false });
    t.same(state(d), ready, `${stage} open site: the pipeline holds what it held before`);
  }
  await p.open(open);
  await p.close();
  t.same(state(d), empty, 'then an open succeeds, and closing returns everything');
});
