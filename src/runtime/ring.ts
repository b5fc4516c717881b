/**
 * Single-producer single-consumer record rings over shared memory, and the doorbells that wake
 * the threads waiting on them.
 *
 * A ring is a header of named Int32 slots and a data area of 32-bit words. A record is
 * `[kind, length, payload × length]`, written whole or not at all, and may wrap around the end
 * of the data area. Float payloads are copied through a Float32Array view of the same words.
 *
 * Memory order: the producer copies a record with plain stores, then publishes it with one
 * `Atomics.store` of `kWrite`; the consumer reads `kWrite` with `Atomics.load`, copies, and
 * releases the space with one `Atomics.store` of `kRead`. Seq-cst atomics make the plain
 * stores before a publish visible to a reader that has loaded the published index.
 *
 * Doorbells: a publish rings the consumer's bell, unless the record is lazy and the ring less
 * than half full; its producer then rings later (`flush`), or its next eager record does. A
 * release rings the producer's bell only when the producer found no room: `canWrite` that fails
 * stores the words it wanted in `kWantSpace`, then checks again; a release stores `kRead`, then
 * reads `kWantSpace` and rings once the room is there. Either the producer's second check sees the release or the release
 * sees the want (both sides store, then load, seq-cst), so no wake-up is lost, and a producer
 * that is not short of room (most of them, most of the time, asleep on the same bell waiting
 * for input) is not woken for nothing.
 *
 * Mirrored data (`SharedRing.mirror`, the capture ring on Linux): the data words live in a
 * mapping the addon makes twice, back to back (native mirrorCreate), and each thread opens its
 * own view of both halves (mirrorView): a record that runs past the end continues at the start
 * of the same memory, so it is copied in one run and never wraps. Only the header stays in the
 * SharedArrayBuffer (its atomics and doorbells need one); the data views are plain
 * ArrayBuffers over shared pages, their plain stores published by the same seq-cst store of
 * `kWrite` (and released by that of `kRead`).
 *
 * Thread contract: exactly one producer thread calls `write*`/`close`; exactly one consumer
 * thread calls `peek*`/`read*`/`skip`. `available*` may be called from either side and can
 * be stale (late) by the time it returns. Nothing here allocates or throws after construction.
 */
import { ArgumentError } from '../errors.js';
import { native } from '../native.js';

/** Header slots (Int32 indices). */
export const kWrite = 0; // next word the producer writes (0 ≤ kWrite < capacity)
export const kRead = 1; // next word the consumer reads
export const kCapacity = 2; // data words
export const kProducerBell = 3; // doorbell rung when space is released
export const kConsumerBell = 4; // doorbell rung when a record is published
export const kClosed = 5; // 1 once the producer will write no more
export const kMaxUsed = 6; // most words ever in use (occupancy high-water)
export const kRecords = 7; // records published (wraps at 2^31)
export const kWantSpace = 8; // words the producer found no room for (0: it is not waiting for space)
export const kHeaderWords = 16;

/** Words a record of `n` payload words takes. */
export const RECORD_OVERHEAD = 2;

/** Bytes of a ring with `capacity` data words. */
export function ringBytes(capacity: number): number {
  return 4 * (kHeaderWords + capacity);
}

/** Bytes of a mirrored ring's header (its data words live in the mirrored mapping). */
export const RING_HEADER_BYTES = 4 * kHeaderWords;

/** The largest record payload a ring of `capacity` data words takes. */
export function maxPayloadOf(capacity: number): number {
  return capacity - 1 - RECORD_OVERHEAD;
}

let mirrorProbe: boolean | null = null;

/**
 * Whether the capture ring is mirrored in this process: where Linux's memfd can map it twice
 * (probed once with one page), unless VOXSLAB_CAPTURE_MIRROR=off asks for the copy-on-wrap ring.
 */
export function captureMirrored(): boolean {
  if (process.env.VOXSLAB_CAPTURE_MIRROR === 'off') return false;
  if (mirrorProbe === null) {
    const r = native.mirrorCreate(native.pageSize());
    mirrorProbe = r.ok;
    if (r.address !== undefined) native.mirrorRelease(r.address);
  }
  return mirrorProbe;
}

/** What a thread hands another to open the same ring. */
export interface SharedRing {
  readonly buffer: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly capacity: number;
  /** The mirrored mapping holding the data words (native mirrorCreate), when there is one. */
  readonly mirror?: bigint | undefined;
}

/**
 * Doorbells: one Int32 per waiting thread. `ring` bumps and notifies; a waiter reads the value
 * first, checks its work, then waits for the value to change (so a ring between the check and
 * the wait is never lost).
 */
export class Doorbells {
  readonly words: Int32Array;

  constructor(words: Int32Array) {
    this.words = words;
  }

  ring(bell: number): void {
    Atomics.add(this.words, bell, 1);
    Atomics.notify(this.words, bell);
  }

  read(bell: number): number {
    return Atomics.load(this.words, bell);
  }

  /** Blocks (worker threads only) until the bell moves past `seen` or `ms` pass ('timed-out'). */
  wait(bell: number, seen: number, ms: number): 'ok' | 'not-equal' | 'timed-out' {
    return Atomics.wait(this.words, bell, seen, ms);
  }
}

// One monomorphic copy per element type and direction: a loop shared by Float32Array and
// Int32Array would be polymorphic, and a deoptimised copy boxes every element it moves. Float
// payloads past NATIVE_COPY words (PCM, mel and embedding rows) are copied by the addon's
// memmove, in one run or two around the end; a native call costs more than a short loop.
const NATIVE_COPY = 64;

function copyFloats(src: Float32Array, at: number, dst: Float32Array, w: number, n: number, cap: number): void {
  if (n >= NATIVE_COPY) {
    const first = Math.min(n, cap - w);
    native.copyF32(src, at, dst, w, first);
    if (first < n) native.copyF32(src, at + first, dst, 0, n - first);
    return;
  }
  for (let i = 0; i < n; i++) {
    dst[w] = src[at + i] as number;
    w = w + 1 === cap ? 0 : w + 1;
  }
}

function copyInts(src: Int32Array, at: number, dst: Int32Array, w: number, n: number, cap: number): void {
  for (let i = 0; i < n; i++) {
    dst[w] = src[at + i] as number;
    w = w + 1 === cap ? 0 : w + 1;
  }
}

function copyOutFloats(src: Float32Array, r: number, dst: Float32Array, at: number, n: number, cap: number): void {
  if (n >= NATIVE_COPY) {
    const first = Math.min(n, cap - r);
    native.copyF32(src, r, dst, at, first);
    if (first < n) native.copyF32(src, 0, dst, at + first, n - first);
    return;
  }
  for (let i = 0; i < n; i++) {
    dst[at + i] = src[r] as number;
    r = r + 1 === cap ? 0 : r + 1;
  }
}

function copyOutInts(src: Int32Array, r: number, dst: Int32Array, at: number, n: number, cap: number): void {
  for (let i = 0; i < n; i++) {
    dst[at + i] = src[r] as number;
    r = r + 1 === cap ? 0 : r + 1;
  }
}

export class RecordRing {
  readonly header: Int32Array; // [kHeaderWords]
  readonly i32: Int32Array; // [capacity] data words ([2][capacity], the same words twice, when mirrored)
  readonly f32: Float32Array; // the same words as floats
  readonly capacity: number;
  readonly mirror: bigint | undefined;
  /** Where a payload copy wraps: the capacity, or twice it when mirrored (a copy never wraps). */
  readonly #span: number;
  readonly bells: Doorbells;
  readonly #producerBell: number;
  readonly #consumerBell: number;
  /** Producer side: lazy records published without a ring, from word #owedFrom, since #owedAt. */
  #owed = false;
  #owedFrom = 0;
  readonly #owedAt = new Float64Array(1);

  /** Lays out a new ring in `buffer` at `byteOffset` (zeroed words expected). */
  static init(shared: SharedRing, bells: Doorbells, producerBell: number, consumerBell: number): RecordRing {
    const h = new Int32Array(shared.buffer, shared.byteOffset, kHeaderWords);
    h[kCapacity] = shared.capacity;
    h[kProducerBell] = producerBell;
    h[kConsumerBell] = consumerBell;
    return new RecordRing(shared, bells);
  }

  constructor(shared: SharedRing, bells: Doorbells) {
    const { buffer, byteOffset, capacity, mirror } = shared;
    if (!(buffer instanceof SharedArrayBuffer)) throw new ArgumentError('ring: buffer must be a SharedArrayBuffer');
    const bytes = mirror === undefined ? ringBytes(capacity) : RING_HEADER_BYTES;
    if (!Number.isSafeInteger(capacity) || capacity < 4 || byteOffset % 4 !== 0 || byteOffset + bytes > buffer.byteLength) {
      throw new ArgumentError(`ring: ${capacity} words at byte ${byteOffset} do not fit a ${buffer.byteLength}-byte buffer`);
    }
    this.header = new Int32Array(buffer, byteOffset, kHeaderWords);
    if (this.header[kCapacity] !== capacity) throw new ArgumentError(`ring: header says ${this.header[kCapacity]} words, expected ${capacity}`);
    if (mirror === undefined) {
      this.i32 = new Int32Array(buffer, byteOffset + 4 * kHeaderWords, capacity);
      this.f32 = new Float32Array(buffer, byteOffset + 4 * kHeaderWords, capacity);
      this.#span = capacity;
    } else {
      const data = native.mirrorView(mirror);
      if (data.byteLength !== 8 * capacity) throw new ArgumentError(`ring: the mirrored mapping holds ${data.byteLength / 8} words, expected ${capacity}`);
      this.i32 = new Int32Array(data);
      this.f32 = new Float32Array(data);
      this.#span = 2 * capacity;
    }
    this.mirror = mirror;
    this.capacity = capacity;
    this.bells = bells;
    this.#producerBell = this.header[kProducerBell] as number;
    this.#consumerBell = this.header[kConsumerBell] as number;
  }

  share(): SharedRing {
    return { buffer: this.header.buffer as SharedArrayBuffer, byteOffset: this.header.byteOffset, capacity: this.capacity, mirror: this.mirror };
  }

  /** Words in use (either side; may be stale). One word always stays free. */
  availableRead(): number {
    const w = Atomics.load(this.header, kWrite);
    const r = Atomics.load(this.header, kRead);
    return w >= r ? w - r : w + this.capacity - r;
  }

  availableWrite(): number {
    return this.capacity - 1 - this.availableRead();
  }

  /** Largest payload a record can have in this ring. */
  get maxPayload(): number {
    return maxPayloadOf(this.capacity);
  }

  // ---- producer side ----

  /**
   * Room for a record of `n` payload words now (it can only grow until the next write). When
   * there is none, the consumer rings the producer's bell once there is.
   */
  canWrite(n: number): boolean {
    const words = n + RECORD_OVERHEAD;
    if (words <= this.availableWrite()) return true;
    Atomics.store(this.header, kWantSpace, words);
    if (words > this.availableWrite()) return false;
    Atomics.store(this.header, kWantSpace, 0);
    return true;
  }

  /**
   * Writes a record whose payload is `n` words of `src` from `at` (floats or ints), or nothing.
   * A `lazy` record does not ring the consumer while the ring is less than half full: the
   * producer rings later with `flush`, or the next eager record does.
   */
  write(kind: number, src: Float32Array | Int32Array | null, at: number, n: number, lazy = false): boolean {
    if (n < 0 || n > this.maxPayload || !this.canWrite(n)) return false;
    const cap = this.capacity;
    const from = Atomics.load(this.header, kWrite);
    let w = from;
    const i32 = this.i32;
    i32[w] = kind;
    w = w + 1 === cap ? 0 : w + 1;
    i32[w] = n;
    w = w + 1 === cap ? 0 : w + 1;
    if (n > 0 && src !== null) {
      // Mirrored: one contiguous run (#span is twice the capacity).
      if (src instanceof Float32Array) copyFloats(src, at, this.f32, w, n, this.#span);
      else copyInts(src, at, i32, w, n, this.#span);
    }
    w = (w + n) % cap;
    this.#publish(from, w, lazy);
    return true;
  }

  /** Writes a record of two int fields (a control record); `lazy` as for `write`. */
  write2(kind: number, a: number, b: number, lazy = false): boolean {
    if (!this.canWrite(2)) return false;
    const cap = this.capacity;
    const from = Atomics.load(this.header, kWrite);
    let w = from;
    const i32 = this.i32;
    i32[w] = kind;
    w = w + 1 === cap ? 0 : w + 1;
    i32[w] = 2;
    w = w + 1 === cap ? 0 : w + 1;
    i32[w] = a;
    w = w + 1 === cap ? 0 : w + 1;
    i32[w] = b;
    w = w + 1 === cap ? 0 : w + 1;
    this.#publish(from, w, lazy);
    return true;
  }

  /** Publishes the record written from word `from` up to `w`. */
  #publish(from: number, w: number, lazy: boolean): void {
    Atomics.store(this.header, kWrite, w);
    const used = this.availableRead();
    if (used > (this.header[kMaxUsed] as number)) Atomics.store(this.header, kMaxUsed, used);
    Atomics.store(this.header, kRecords, (((this.header[kRecords] as number) + 1) & 0x7fffffff) | 0);
    if (lazy && 2 * used < this.capacity) {
      if (!this.#owed) this.#owe(from);
      return;
    }
    this.#owed = false;
    this.bells.ring(this.#consumerBell);
  }

  /** From word `from` on, records are published that the consumer was not rung for. */
  #owe(from: number): void {
    this.#owed = true;
    this.#owedFrom = from;
    native.clockInto(this.#owedAt, 0);
  }

  /**
   * Whether lazy records the consumer was not rung for are still unread. When it has read some of
   * them since (woken for another reason), what follows is owed from now.
   */
  owes(): boolean {
    if (!this.#owed) return false;
    const r = Atomics.load(this.header, kRead);
    const w = Atomics.load(this.header, kWrite);
    const cap = this.capacity;
    if ((this.#owedFrom - r + cap) % cap < (w - r + cap) % cap) return true;
    if (r === w) this.#owed = false;
    else this.#owe(r);
    return this.#owed;
  }

  /** Monotonic ms at which the oldest owed record was noticed (native clock). */
  get owedAt(): number {
    return this.#owedAt[0] as number;
  }

  /** Rings the consumer for lazy records it has not read. */
  flush(): void {
    if (!this.owes()) return;
    this.#owed = false;
    this.bells.ring(this.#consumerBell);
  }

  /** Marks the end of the stream: the consumer sees `closed` once it has read everything. */
  close(): void {
    Atomics.store(this.header, kClosed, 1);
    this.#owed = false;
    this.bells.ring(this.#consumerBell);
  }

  // ---- consumer side ----

  /** Kind of the next record, or -1 when none is published. */
  peekKind(): number {
    const r = Atomics.load(this.header, kRead);
    if (r === Atomics.load(this.header, kWrite)) return -1;
    return this.i32[r] as number;
  }

  /** Kind of the record after the next, or -1 when it is not published (call after peekKind() ≥ 0). */
  peekNextKind(): number {
    const cap = this.capacity;
    const r = Atomics.load(this.header, kRead);
    const n = this.i32[r + 1 === cap ? 0 : r + 1] as number;
    const r2 = (r + RECORD_OVERHEAD + n) % cap;
    if (r2 === Atomics.load(this.header, kWrite)) return -1;
    return this.i32[r2] as number;
  }

  /** Payload words of the next record (call after peekKind() ≥ 0). */
  peekLength(): number {
    const r = Atomics.load(this.header, kRead);
    return this.i32[r + 1 === this.capacity ? 0 : r + 1] as number;
  }

  /** Payload word `i` of the next record as an int. */
  peekInt(i: number): number {
    const r = Atomics.load(this.header, kRead);
    return this.i32[(r + RECORD_OVERHEAD + i) % this.capacity] as number;
  }

  /** Copies the next record's payload into `dst` from `at` (floats or ints) and releases it. Returns its length. */
  read(dst: Float32Array | Int32Array, at: number): number {
    const cap = this.capacity;
    let r = Atomics.load(this.header, kRead);
    const n = this.i32[r + 1 === cap ? 0 : r + 1] as number;
    r = (r + RECORD_OVERHEAD) % cap;
    if (dst instanceof Float32Array) copyOutFloats(this.f32, r, dst, at, n, this.#span);
    else copyOutInts(this.i32, r, dst, at, n, this.#span);
    this.#release((r + n) % cap);
    return n;
  }

  /** Releases the next record without copying it. */
  skip(): void {
    const cap = this.capacity;
    const r = Atomics.load(this.header, kRead);
    const n = this.i32[r + 1 === cap ? 0 : r + 1] as number;
    this.#release((r + RECORD_OVERHEAD + n) % cap);
  }

  #release(r: number): void {
    Atomics.store(this.header, kRead, r);
    const want = Atomics.load(this.header, kWantSpace);
    if (want > 0 && want <= this.availableWrite()) {
      Atomics.store(this.header, kWantSpace, 0);
      this.bells.ring(this.#producerBell);
    }
  }

  /** True once the producer closed the ring and every record was read. */
  get drained(): boolean {
    return Atomics.load(this.header, kClosed) === 1 && this.peekKind() < 0;
  }

  get maxUsed(): number {
    return Atomics.load(this.header, kMaxUsed);
  }

  get records(): number {
    return Atomics.load(this.header, kRecords);
  }
}
