// Worker for the ring tests: one side of a record ring. The producer writes seeded records of
// random sizes whose payload is derived from the record's sequence number; the consumer checks
// every record against the same generator (sequence, kind, length, every word).
import { workerData, parentPort } from 'node:worker_threads';
import { Doorbells, RecordRing, type SharedRing } from '../../../src/runtime/ring.js';
import { prng } from '../../helpers.js';

export interface RingPeerData {
  role: 'producer' | 'consumer';
  ring: SharedRing;
  bells: SharedArrayBuffer;
  bell: number; // this thread's doorbell
  records: number;
  maxPayload: number;
  seed: number;
  /** Pause (µs of busy spin) after every `pauseEvery` records: a slow side. 0 = never. */
  pauseEvery: number;
  pauseMicros: number;
  /** Producer only: record whose payload word 0 is written wrong (negative control). -1 = none. */
  corruptAt: number;
}

export interface RingPeerResult {
  records: number;
  words: number;
  bad: number;
  firstBad: string | null;
  waits: number;
  /** Waits that ended by their timeout: a wake-up that was lost (none is slower than 1 s). */
  timeouts: number;
}

function spin(us: number): void {
  const end = performance.now() + us / 1000;
  while (performance.now() < end);
}

/** The value of payload word i of record k (floats for odd k, ints for even k). */
export function word(k: number, i: number): number {
  return (Math.imul(k + 1, 0x9e3779b1) ^ Math.imul(i + 7, 0x85ebca6b)) | 0;
}

const d = workerData as RingPeerData;
const bells = new Doorbells(new Int32Array(d.bells));
const ring = new RecordRing(d.ring, bells);
const rand = prng(d.seed);
const sizes = new Int32Array(d.records);
for (let k = 0; k < d.records; k++) sizes[k] = Math.floor(rand() * (d.maxPayload + 1));
const ints = new Int32Array(d.maxPayload);
const floats = new Float32Array(d.maxPayload);
const result: RingPeerResult = { records: 0, words: 0, bad: 0, firstBad: null, waits: 0, timeouts: 0 };

if (d.role === 'producer') {
  for (let k = 0; k < d.records; k++) {
    const n = sizes[k] as number;
    const useFloat = (k & 1) === 1;
    for (let i = 0; i < n; i++) {
      const v = word(k, i);
      if (useFloat) floats[i] = (v % 1000003) / 7;
      else ints[i] = v;
    }
    if (k === d.corruptAt && n > 0) {
      if (useFloat) floats[0] = (floats[0] as number) + 1;
      else ints[0] = (ints[0] as number) ^ 1;
    }
    for (;;) {
      const seen = bells.read(d.bell);
      if (ring.write(k & 0xff, useFloat ? floats : ints, 0, n)) break;
      result.waits++;
      if (bells.wait(d.bell, seen, 1000) === 'timed-out') result.timeouts++;
    }
    result.records++;
    result.words += n;
    if (d.pauseEvery > 0 && k % d.pauseEvery === 0) spin(d.pauseMicros);
  }
  ring.close();
} else {
  for (let k = 0; ; ) {
    const seen = bells.read(d.bell);
    const kind = ring.peekKind();
    if (kind < 0) {
      if (ring.drained) break;
      result.waits++;
      if (bells.wait(d.bell, seen, 1000) === 'timed-out') result.timeouts++;
      continue;
    }
    const useFloat = (k & 1) === 1;
    const n = ring.read(useFloat ? floats : ints, 0);
    let ok = kind === (k & 0xff) && n === sizes[k];
    for (let i = 0; ok && i < n; i++) {
      const v = word(k, i);
      ok = useFloat ? floats[i] === Math.fround((v % 1000003) / 7) : ints[i] === v;
    }
    if (!ok) {
      result.bad++;
      result.firstBad ??= `record ${k}: kind ${kind}, ${n} words`;
    }
    result.records++;
    result.words += n;
    k++;
    if (d.pauseEvery > 0 && k % d.pauseEvery === 0) spin(d.pauseMicros);
  }
}
parentPort!.postMessage(result);
