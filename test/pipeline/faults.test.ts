import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AllocationError, MemoryLimitError } from '../../src/errors.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { SpeechModel } from '../../src/pipeline/conversation.js';

// Fault injection at every allocation site of model load and conversation open: each site in
// turn is refused by the cap or fails in the allocator. Each time the error is typed and names
// the site, the ledger and the cap are back to where they were, and the next attempt succeeds.
const dir = mkdtempSync(join(tmpdir(), 'voxslab-faults-'));
makeCheckpoint({ config: 'tiny', seed: 5, out: dir, dtype: 'f32' });

/** An allocator that records every call and fails the `failAt`-th (1-based) after `arm`. */
function injector() {
  const s = { calls: 0, failAt: 0, inUseAtCall: [] as number[], domain: null as MemoryDomain | null };
  const allocator = {
    allocate(n: number): SharedArrayBuffer {
      s.calls++;
      s.inUseAtCall.push(s.domain === null ? 0 : s.domain.snapshot().held.total + s.domain.snapshot().reserved);
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
