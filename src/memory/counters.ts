import { threadId } from 'node:worker_threads';
import { ArgumentError, SharedStateError } from '../errors.js';

/** Header words of a counter block (Int32 slots). */
const kLock = 0; // 0 free, 1 held, 2 held with waiters
const kSeq = 1; // even: stable; odd: a write is in progress
const kHolder = 2; // the holding thread's id + 1 while the lock is held, else 0
const kHeaderWords = 4;
const kSpinsBeforeWait = 64;
const kWaitSliceMs = 50;
/** Longest a thread waits for the lock or a stable read before it reports a stuck writer. */
const kStuckMs = 5000;
/** Seqlock attempts before a reader falls back to taking the lock. */
const kReadAttempts = 256;

const TWO_32 = 2 ** 32;

/**
 * A block of 64-bit unsigned counters in one SharedArrayBuffer, shared by every thread.
 *
 * Writers are serialised by an Atomics mutex and bump a sequence number around each write
 * section; readers take a coherent copy of any prefix of the counters without blocking
 * writers (seqlock), retrying while a write is in progress and falling back to the lock
 * after a bounded number of attempts, so they always make progress.
 *
 * Each counter is two Uint32 words written and read with Atomics, so no access tears and
 * values up to 2^53-1 are exact. No method allocates except on an error path.
 *
 * Thread contract: any thread may read or write. Write sections must be short and must not
 * throw half-way (validate first). A lock wait that times out (SharedStateError) leaves the
 * thread exactly as before the call. A thread that dies inside a write section leaves the
 * lock held, with its thread id in the lock's holder word: others fail with SharedStateError
 * after a few seconds instead of hanging, until whoever saw it exit (the pipeline's
 * coordinator) calls `releaseIfHeldBy(itsThreadId)`; the counters its write section was
 * changing may then be half-updated, so the caller treats the block as suspect (the
 * coordinator returns that worker's slabs from their records and goes on).
 */
export class SharedCounters {
  readonly buffer: SharedArrayBuffer;
  readonly count: number;
  readonly #header: Int32Array;
  readonly #words: Uint32Array;
  #depth = 0;

  constructor(bufferOrCount: SharedArrayBuffer | number) {
    if (typeof bufferOrCount === 'number') {
      if (!Number.isSafeInteger(bufferOrCount) || bufferOrCount <= 0 || bufferOrCount > 1 << 24) {
        throw new ArgumentError(`counter count must be an integer from 1 to 2^24, got ${bufferOrCount}`);
      }
      this.buffer = new SharedArrayBuffer(SharedCounters.bytesFor(bufferOrCount));
    } else {
      if (!(bufferOrCount instanceof SharedArrayBuffer)) {
        throw new ArgumentError('counters must be attached to a SharedArrayBuffer');
      }
      const words = bufferOrCount.byteLength / 4 - kHeaderWords;
      if (!Number.isInteger(words) || words <= 0 || words % 2 !== 0) {
        throw new ArgumentError(`a ${bufferOrCount.byteLength}-byte buffer is not a counter block`);
      }
      this.buffer = bufferOrCount;
    }
    this.count = (this.buffer.byteLength / 4 - kHeaderWords) / 2;
    this.#header = new Int32Array(this.buffer, 0, kHeaderWords);
    this.#words = new Uint32Array(this.buffer, kHeaderWords * 4, this.count * 2);
  }

  static bytesFor(count: number): number {
    return (kHeaderWords + count * 2) * 4;
  }

  /** Current sequence number (even when stable). */
  get sequence(): number {
    return Atomics.load(this.#header, kSeq);
  }

  /**
   * Enters a write section (re-entrant within a thread). Pair with endWrite() in finally.
   * When the lock cannot be had it throws SharedStateError and the thread holds nothing.
   */
  beginWrite(): void {
    if (this.#depth > 0) {
      this.#depth++;
      return;
    }
    this.#lock();
    this.#depth = 1;
    Atomics.store(this.#header, kHolder, threadId + 1);
    Atomics.add(this.#header, kSeq, 1);
  }

  /** The id of the thread holding the lock, or -1. */
  get holder(): number {
    return Atomics.load(this.#header, kHolder) - 1;
  }

  /**
   * Releases the lock when a thread that has exited left it held (its id is in the holder
   * word): the sequence is made even again and waiters are woken. Returns whether it did.
   * Only for a thread known to be gone: the lock is then nobody's.
   */
  releaseIfHeldBy(deadThreadId: number): boolean {
    const h = this.#header;
    if (Atomics.compareExchange(h, kHolder, deadThreadId + 1, 0) !== deadThreadId + 1) return false;
    if ((Atomics.load(h, kSeq) & 1) === 1) Atomics.add(h, kSeq, 1);
    Atomics.store(h, kLock, 0);
    Atomics.notify(h, kLock);
    return true;
  }

  endWrite(): void {
    if (this.#depth === 0) throw new SharedStateError('endWrite() without beginWrite()');
    if (--this.#depth > 0) return;
    Atomics.add(this.#header, kSeq, 1);
    Atomics.store(this.#header, kHolder, 0);
    this.#unlock();
  }

  /** Reads one counter atomically (both words). Inside a write section this is exact. */
  get(index: number): number {
    const i = index * 2;
    // Without the lock the two words could come from different writes; callers outside a
    // write section use read() for a coherent value.
    return Atomics.load(this.#words, i) * TWO_32 + Atomics.load(this.#words, i + 1);
  }

  /** Sets one counter. Only inside a write section. */
  set(index: number, value: number): void {
    const i = index * 2;
    Atomics.store(this.#words, i, Math.floor(value / TWO_32));
    Atomics.store(this.#words, i + 1, value % TWO_32);
  }

  /** Adds a (possibly negative) delta. Only inside a write section. */
  add(index: number, delta: number): number {
    const v = this.get(index) + delta;
    this.set(index, v);
    return v;
  }

  /**
   * Copies counters [0, n) into `out` as one consistent state and returns the sequence
   * number it belongs to. `n` may be computed from the counters themselves: `prefix(read)`
   * is called with a reader over the copy of the first `head` counters and returns how
   * many counters in all to copy (e.g. a live-owner count). No allocation.
   */
  read(out: Float64Array, head: number, prefix?: (copied: Float64Array) => number): number {
    const deadline = performance.now() + kStuckMs;
    for (let attempt = 0; ; attempt++) {
      if (attempt >= kReadAttempts) {
        // Many writes in a row: read under the lock so the reader is never starved.
        this.beginWrite();
        try {
          this.#copy(out, head, prefix);
          return Atomics.load(this.#header, kSeq) - 1;
        } finally {
          this.endWrite();
        }
      }
      const s1 = Atomics.load(this.#header, kSeq);
      if ((s1 & 1) === 1) {
        if (performance.now() > deadline) throw this.#stuck('read');
        continue;
      }
      this.#copy(out, head, prefix);
      if (Atomics.load(this.#header, kSeq) === s1) return s1;
    }
  }

  /** Deliberately incoherent read of one counter, for tests that show why read() exists. */
  readOneUnsynchronised(index: number): number {
    return this.get(index);
  }

  #copy(out: Float64Array, head: number, prefix?: (copied: Float64Array) => number): void {
    const w = this.#words;
    for (let c = 0, i = 0; c < head; c++, i += 2) out[c] = Atomics.load(w, i) * TWO_32 + Atomics.load(w, i + 1);
    const n = prefix === undefined ? head : Math.min(prefix(out), this.count, out.length);
    for (let c = head, i = head * 2; c < n; c++, i += 2) out[c] = Atomics.load(w, i) * TWO_32 + Atomics.load(w, i + 1);
  }

  #lock(): void {
    const h = this.#header;
    let c = Atomics.compareExchange(h, kLock, 0, 1);
    if (c === 0) return;
    for (let spin = 0; spin < kSpinsBeforeWait; spin++) {
      c = Atomics.compareExchange(h, kLock, 0, 1);
      if (c === 0) return;
    }
    const deadline = performance.now() + kStuckMs;
    if (c !== 2) c = Atomics.exchange(h, kLock, 2);
    while (c !== 0) {
      Atomics.wait(h, kLock, 2, kWaitSliceMs);
      if (performance.now() > deadline) throw this.#stuck('lock');
      c = Atomics.exchange(h, kLock, 2);
    }
  }

  #unlock(): void {
    if (Atomics.sub(this.#header, kLock, 1) !== 1) {
      Atomics.store(this.#header, kLock, 0);
      Atomics.notify(this.#header, kLock, 1);
    }
  }

  #stuck(what: string): SharedStateError {
    return new SharedStateError(`shared memory accounting: could not ${what} within ${kStuckMs} ms; a thread may have died inside a write section`);
  }
}
