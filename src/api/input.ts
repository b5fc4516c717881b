/**
 * A conversation's input on the application's thread: the blocks queued and not yet in the
 * pipeline's input ring, fed to it a record at a time. A block is mono speech, or (writeDuplex)
 * [microphone | far end] halves sent as DUPLEX records; `null` marks the end of a turn.
 *
 * Thread contract: the main thread only.
 */
import type { ConversationPort } from '../runtime/port.js';

export class InputQueue {
  readonly #queue: (Float32Array | null)[] = [];
  /** Queued blocks that hold [microphone | far end]. */
  readonly #pairs = new WeakSet<Float32Array>();
  /** One DUPLEX record's payload, reused. */
  readonly #pair: Float32Array;
  #at = 0; // samples of the head already in the ring

  constructor(chunk: number) {
    this.#pair = new Float32Array(2 * chunk);
  }

  get length(): number {
    return this.#queue.length;
  }

  /** The next block (`null`: a turn's end), or undefined when the queue is empty. */
  head(): Float32Array | null | undefined {
    return this.#queue[0];
  }

  /** Drops the head (a turn's end that was sent). */
  shift(): void {
    this.#queue.shift();
  }

  push(block: Float32Array | null, pair = false): void {
    if (pair && block !== null) this.#pairs.add(block);
    this.#queue.push(block);
  }

  /** Samples (per channel) queued and not yet in the ring. */
  backlog(): number {
    let n = -this.#at;
    for (const q of this.#queue) if (q !== null) n += this.#pairs.has(q) ? q.length / 2 : q.length;
    return n;
  }

  /** Empties the queue; returns the floats dropped (both halves of a pair: what `write` counted). */
  clear(): number {
    const head = this.#queue[0];
    let units = head !== null && head !== undefined && this.#pairs.has(head) ? -2 * this.#at : -this.#at;
    for (const q of this.#queue) if (q !== null) units += q.length;
    this.#queue.length = 0;
    this.#at = 0;
    return units;
  }

  /** Writes up to `most` samples of the head block as one record; returns how many (0: the ring is full). */
  feed(port: ConversationPort, most: number): number {
    const head = this.#queue[0]!;
    if (this.#pairs.has(head)) return this.#feedPair(port, head, most);
    const n = Math.min(most, head.length - this.#at);
    if (!port.writePcm(head, this.#at, n)) return 0;
    this.#advance(n, head.length);
    return n;
  }

  /** A [microphone | far end] block: up to `most` samples of each, as one DUPLEX record. */
  #feedPair(port: ConversationPort, head: Float32Array, most: number): number {
    const half = head.length / 2;
    const n = Math.min(most, half - this.#at);
    const p = this.#pair;
    for (let i = 0; i < n; i++) {
      p[i] = head[this.#at + i]!;
      p[n + i] = head[half + this.#at + i]!;
    }
    if (!port.writeDuplex(p, 0, 2 * n)) return 0;
    this.#advance(n, half);
    return n;
  }

  #advance(n: number, length: number): void {
    this.#at += n;
    if (this.#at < length) return;
    this.#queue.shift();
    this.#at = 0;
  }
}
