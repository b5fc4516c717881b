import t from 'tap';
import { Worker } from 'node:worker_threads';
import { Ledger, MemoryDomain, SharedCounters, apportion, kMaxOwners } from '../../src/memory/index.js';

t.test('owners get the same slot in every thread; shared storage is charged once', async (t) => {
  const domain = MemoryDomain.create({ limit: '64MiB' });
  const model = domain.owner('model');
  const weights = domain.createArena(model, 'weights', { bytes: 1 << 20 });
  weights.carve('w', 'weights', Float32Array, 200_000).fill(1);
  weights.seal();
  // A worker attaches, registers two conversations and borrows the weights for both.
  const src = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.url).then(({ MemoryDomain }) => {
      const d = MemoryDomain.attach(workerData.shared);
      const model = d.owner('model');
      const out = [];
      for (const i of [0, 1]) {
        const c = d.owner('conversation', i);
        d.ledger.borrow(model, c);
        const a = d.createArena(c, 'state' + i, { bytes: 8192 });
        a.carve('kv', 'recurrence', Float32Array, 1000);
        out.push(c.slot);
      }
      parentPort.postMessage({ model: model.slot, conv: out });
    });`;
  const url = new URL('../../src/memory/index.js', import.meta.url).href;
  const got = await new Promise<{ model: number; conv: number[] }>((resolve, reject) => {
    const w = new Worker(src, { eval: true, workerData: { shared: domain.share(), url } });
    w.once('message', resolve);
    w.once('error', reject);
  });
  t.equal(got.model, model.slot, 'the worker found the same model slot');
  t.same(got.conv, [domain.owner('conversation', 0).slot, domain.owner('conversation', 1).slot]);

  const s = domain.snapshot();
  const m = s.owners.find((o) => o.name === 'model/0')!;
  t.same(m.borrowers, ['conversation/0', 'conversation/1'], 'borrowers are listed');
  t.equal(m.held, 1 << 20, 'the weights are charged once, to the model');
  for (const i of [0, 1]) {
    const c = s.owners.find((o) => o.name === `conversation/${i}`)!;
    t.equal(c.held, 8192, `conversation/${i} pays only for its own state`);
    t.equal(c.categories.weights, undefined);
  }
  t.equal(
    s.owners.reduce((a, o) => a + o.held, 0),
    s.held.total,
    'owners sum to the total',
  );
  const ap = apportion(s);
  t.equal(
    Object.values(ap).reduce((a, b) => a + b, 0),
    s.held.total,
    'the apportioned view sums to the total too',
  );
  t.ok(ap['conversation/0']! > 8192, 'and spreads the shared bytes over borrowers');
  const manifest = domain.manifest();
  t.equal(manifest.policy.charging, 'once-to-creator');
  t.equal(manifest.totals.current, s.held.total);
  t.equal(manifest.owners['model/0']!.categories.weights!.requested, 800_000);
  t.ok(manifest.totals.resident !== null && manifest.totals.resident >= 800_000, 'resident bytes measured');
});

t.test('ledger argument checks', async (t) => {
  const ledger = Ledger.create(2);
  t.throws(() => ledger.owner('robot' as never), /owner kind must be one of model, conversation, ticket, session/);
  t.throws(() => ledger.owner('ticket', -1), /non-negative integer/);
  ledger.owner('ticket', 0);
  ledger.owner('ticket', 1);
  t.throws(() => ledger.owner('ticket', 2), /ledger is full: 2 owners/);
  t.throws(() => ledger.charge({ slot: 9 } as never, 'scratch', 1, 1), /owner must come from/);
  const o = ledger.owner('ticket', 0);
  t.throws(() => ledger.charge(o, 'scratch', 10, 64), /exceeds its 0 uncarved slab bytes/);
  t.throws(() => ledger.charge(o, 'scratch', 100, 64), /requested 100 exceeds footprint 64/);
  t.throws(() => ledger.charge(o, 'nope' as never, 1, 1), /category must be one of/);
  t.throws(() => Ledger.create(kMaxOwners + 1), /ownerCapacity/);
  t.throws(() => new SharedCounters(new SharedArrayBuffer(7)), /not a counter block/);
  t.throws(() => MemoryDomain.attach({} as never), /MemoryDomain.share/);
  t.throws(() => ledger.setPassSlots(o, -1), /non-negative/);
  ledger.setPassSlots(o, 2);
  t.equal(ledger.snapshot().owners[0]!.passSlots, 2);
});

t.test('borrowers at any owner slot are listed by their lender; an owner borrows from one owner at a time', async (t) => {
  const ledger = Ledger.create(1000);
  t.equal(ledger.ownerCapacity, 1000);
  const model = ledger.owner('model', 0);
  const owners = Array.from({ length: 999 }, (_, i) => ledger.owner('conversation', i));
  t.equal(ledger.freeOwnerSlots(), 0, 'every slot taken');
  t.throws(() => ledger.owner('session', 0), /ledger is full/);
  t.ok(ledger.registered('conversation', 900) && !ledger.registered('session', 0));
  const borrowers = [owners[0]!, owners[63]!, owners[64]!, owners[500]!, owners.at(-1)!];
  for (const b of borrowers) ledger.borrow(model, b);
  ledger.borrow(model, owners[0]!);
  ledger.unborrow(model, owners[500]!);
  ledger.unborrow(owners[1]!, owners[63]!);
  const listed = ledger.snapshot().owners.find((o) => o.name === 'model/0')!.borrowers;
  t.same(listed, ['conversation/0', 'conversation/63', 'conversation/64', 'conversation/998'], 'each borrower once, in slot order');
  t.throws(() => ledger.borrow(owners[1]!, owners[0]!), /'conversation\/0' already borrows from owner slot 0/);
  t.same(ledger.snapshot().owners.find((o) => o.name === 'conversation/1')!.borrowers, [], 'the refused borrow left nothing');
  t.throws(() => Ledger.create(kMaxOwners + 1), /ownerCapacity must be an integer from 1 to 4096/);
});
