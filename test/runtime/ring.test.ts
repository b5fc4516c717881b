import t from 'tap';
import { Doorbells, RecordRing, RING_HEADER_BYTES, ringBytes, kMaxUsed } from '../../src/runtime/ring.js';
import { native } from '../../src/native.js';
import { runWorker } from '../helpers.js';
import type { RingPeerData, RingPeerResult } from './workers/ring-peer.js';

const peer = new URL('./workers/ring-peer.js', import.meta.url);

function newRing(capacity: number, mirror?: bigint) {
  const buffer = new SharedArrayBuffer(mirror === undefined ? ringBytes(capacity) : RING_HEADER_BYTES);
  const bells = new SharedArrayBuffer(8);
  RecordRing.init({ buffer, byteOffset: 0, capacity, mirror }, new Doorbells(new Int32Array(bells)), 0, 1);
  return { ring: { buffer, byteOffset: 0, capacity, mirror }, bells };
}

async function pair(
  capacity: number,
  o: Partial<RingPeerData> & { records: number; maxPayload: number },
  slow: 'producer' | 'consumer' | null,
  mirror?: bigint,
) {
  const { ring, bells } = newRing(capacity, mirror);
  const base = { ring, bells, seed: 7, pauseEvery: 0, pauseMicros: 0, corruptAt: -1, ...o };
  const pause = { pauseEvery: 997, pauseMicros: 300 };
  const [p, c] = await Promise.all([
    runWorker<RingPeerResult>(peer, { ...base, role: 'producer', bell: 0, ...(slow === 'producer' ? pause : {}) }),
    runWorker<RingPeerResult>(peer, { ...base, role: 'consumer', bell: 1, corruptAt: -1, ...(slow === 'consumer' ? pause : {}) }),
  ]);
  return { p, c, maxUsed: new Int32Array(ring.buffer, 0, 16)[kMaxUsed] as number };
}

t.test('a record ring carries a million random-size records between two threads intact', async (t) => {
  const { p, c, maxUsed } = await pair(4096, { records: 1_000_000, maxPayload: 64 }, null);
  t.equal(c.records, 1_000_000);
  t.equal(c.words, p.words, `${c.words} payload words`);
  t.equal(c.bad, 0, c.firstBad ?? 'every record verified');
  t.ok(maxUsed > 0 && maxUsed < 4096, `occupancy high-water ${maxUsed} of 4096 words`);
});

t.test('slow consumer (producer waits on its doorbell) and slow producer (consumer waits); records larger than half the ring', async (t) => {
  const slowC = await pair(512, { records: 50_000, maxPayload: 300 }, 'consumer');
  t.equal(slowC.c.bad, 0, slowC.c.firstBad ?? 'slow consumer: every record verified');
  t.ok(slowC.p.waits > 0, `the producer found the ring full ${slowC.p.waits} times`);
  t.equal(slowC.p.timeouts, 0, 'every time the consumer made room, the waiting producer was rung (no wait ran into its timeout)');
  const slowP = await pair(512, { records: 50_000, maxPayload: 300 }, 'producer');
  t.equal(slowP.c.bad, 0, slowP.c.firstBad ?? 'slow producer: every record verified');
  t.ok(slowP.c.waits > 0, `the consumer found the ring empty ${slowP.c.waits} times`);
  t.equal(slowP.c.timeouts, 0, 'every record woke the waiting consumer');
  t.equal(slowP.c.records, 50_000);
});

t.test('negative control: the verifier catches one corrupted word', async (t) => {
  const { c } = await pair(1024, { records: 20_000, maxPayload: 40, corruptAt: 12_345 }, null);
  t.equal(c.bad, 1, 'exactly one bad record');
  t.match(c.firstBad, /^record 12345:/);
});

t.test('all-or-nothing writes, wrap-around, close and drain on one thread', async (t) => {
  const { ring, bells } = newRing(16);
  const r = new RecordRing(ring, new Doorbells(new Int32Array(bells)));
  t.equal(r.maxPayload, 13);
  t.notOk(r.write(1, new Int32Array(14), 0, 14), 'a record larger than the ring is refused');
  const src = Int32Array.from({ length: 10 }, (_, i) => i + 1);
  const dst = new Int32Array(10);
  for (let round = 0; round < 20; round++) {
    t.ok(r.write(2, src, 0, 7), 'fits');
    t.notOk(r.write(3, src, 0, 7), 'no room for a second one: nothing written');
    t.equal(r.peekKind(), 2);
    t.equal(r.read(dst, 0), 7);
    if (Array.from(dst.subarray(0, 7)).join() !== '1,2,3,4,5,6,7') t.fail(`round ${round}: payload ${dst.join()}`);
  }
  t.ok(r.write2(9, -5, 6));
  t.equal(r.peekInt(0), -5);
  t.equal(r.peekInt(1), 6);
  r.skip();
  t.equal(r.peekKind(), -1);
  t.notOk(r.drained);
  r.close();
  t.ok(r.drained);
});

t.test('peekNextKind names the record after the next once it is published, across the wrap', async (t) => {
  const { ring, bells } = newRing(16);
  const r = new RecordRing(ring, new Doorbells(new Int32Array(bells)));
  const src = Int32Array.from({ length: 8 }, (_, i) => i + 1);
  const dst = new Int32Array(8);
  const seen: string[] = [];
  // Records of 3 + 2 words: the pair lands at every offset of the 16 words in turn.
  for (let round = 0; round < 16; round++) {
    t.ok(r.write(4, src, 0, 1));
    seen.push(`${r.peekKind()}:${r.peekNextKind()}`);
    t.ok(r.write(5, null, 0, 0));
    seen.push(`${r.peekKind()}:${r.peekNextKind()}`);
    r.read(dst, 0);
    seen.push(`${r.peekKind()}:${r.peekNextKind()}`);
    r.skip();
  }
  t.equal(seen.join(' '), Array.from({ length: 16 }, () => '4:-1 4:5 5:-1').join(' '), 'alone: -1; with one after it: its kind');
  t.equal(r.peekKind(), -1);
});

t.test('doorbells: a release rings the producer only when it found no room; a lazy record waits for flush or half a ring', async (t) => {
  const { ring, bells } = newRing(64);
  const words = new Int32Array(bells);
  const r = new RecordRing(ring, new Doorbells(words));
  const producer = () => Atomics.load(words, 0);
  const consumer = () => Atomics.load(words, 1);
  const src = new Int32Array(32);
  const dst = new Int32Array(32);
  // Room to spare: reads release space without waking the producer.
  t.ok(r.write(1, src, 0, 20));
  t.equal(consumer(), 1, 'a record rings the consumer');
  r.read(dst, 0);
  t.equal(producer(), 0, 'a release the producer did not wait for rings nothing');
  // Short of room: the producer's failed check asks to be rung once the room is there.
  t.ok(r.write(1, src, 0, 30));
  t.ok(r.write(1, src, 0, 20));
  t.notOk(r.canWrite(20), 'no room for a third record');
  r.read(dst, 0);
  t.equal(producer(), 1, 'the release that made the room rings the producer');
  r.read(dst, 0);
  t.equal(producer(), 1, 'and only that one');
  t.notOk(r.canWrite(70), 'a record larger than the ring never fits');
  t.equal(r.peekKind(), -1);
  // Lazy records: no ring until flush, unless the ring is half full.
  const before = consumer();
  t.ok(r.write2(5, 1, 2, true));
  t.ok(r.write(6, src, 0, 4, true));
  t.equal(consumer(), before, 'lazy records ring nothing');
  t.ok(r.owes());
  r.flush();
  t.equal(consumer(), before + 1, 'flush rings once for them');
  t.notOk(r.owes());
  r.flush();
  t.equal(consumer(), before + 1, 'a second flush rings nothing');
  t.ok(r.write2(5, 3, 4, true));
  r.skip();
  r.skip();
  r.skip();
  t.notOk(r.owes(), 'lazy records the consumer read anyway are not owed');
  r.flush();
  t.equal(consumer(), before + 1, 'so flush rings nothing');
  t.ok(r.write(6, src, 0, 10, true));
  t.ok(r.write(6, src, 0, 10, true));
  t.equal(consumer(), before + 1);
  r.skip();
  t.ok(r.owes(), 'of two lazy records the consumer read one: the other is still owed');
  t.ok(r.write(6, src, 0, 28, true));
  t.equal(consumer(), before + 2, 'a lazy record that leaves the ring half full or more rings');
  t.notOk(r.owes());
  r.skip();
  r.skip();
  t.ok(r.write2(7, 0, 0, true));
  t.ok(r.owes());
  t.equal(consumer(), before + 2);
  t.ok(r.write2(8, 0, 0));
  t.equal(consumer(), before + 3, 'an eager record rings');
  t.notOk(r.owes(), 'and pays what was owed');
});

const linux = process.platform === 'linux' ? false : 'mirrored mappings are made on Linux';

t.test('a mirrored ring (the capture ring): both halves are the same memory, and records cross threads intact', { skip: linux }, async (t) => {
  const capacity = native.pageSize() / 4;
  const made = native.mirrorCreate(4 * capacity);
  t.ok(made.ok && made.address !== undefined, `mirrorCreate: ${made.message || 'ok'}`);
  const address = made.address!;
  const view = new Int32Array(native.mirrorView(address));
  t.equal(view.length, 2 * capacity, 'a view spans both halves');
  view[capacity + 5] = 42;
  view[3] = -7;
  t.equal(view[5], 42, 'a word written past the end is the word at the start');
  t.equal(view[capacity + 3], -7, 'and the other way');
  // Records of up to 300 words in a ring of one page: most of them run past the end.
  const { p, c, maxUsed } = await pair(capacity, { records: 250_000, maxPayload: 300 }, null, address);
  t.equal(c.records, 250_000);
  t.equal(c.words, p.words, `${c.words} payload words`);
  t.equal(c.bad, 0, c.firstBad ?? 'every record verified');
  t.ok(maxUsed > 0 && maxUsed < capacity, `occupancy high-water ${maxUsed} of ${capacity} words`);
  const control = await pair(capacity, { records: 20_000, maxPayload: 300, corruptAt: 4_321 }, null, address);
  t.equal(control.c.bad, 1, 'negative control: the verifier catches one corrupted word in the mirrored ring');
  native.mirrorRelease(address);
  t.throws(() => native.mirrorView(12345n), /no mirrored mapping/, 'a view of an unknown mapping is refused');
});
