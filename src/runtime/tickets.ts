/**
 * Pass slots ("tickets") of one compute stage. Each slot owns private scratch carved from the
 * stage's slab by its plan (owner `ticket/<n>`); a pass holds its slot from its first op to
 * its last, so two passes in flight never share scratch.
 *
 * Thread contract: one stage thread; acquire/release allocate nothing.
 */
export class TicketPool<T> {
  readonly slots: readonly T[];
  readonly #holder: Int32Array; // conversation holding each slot, -1 = free
  #busy = 0;
  /** Most slots held at once, and passes that began while another slot was held. */
  maxBusy = 0;
  overlapped = 0;

  constructor(slots: readonly T[]) {
    this.slots = slots;
    this.#holder = new Int32Array(slots.length).fill(-1);
  }

  /** The slot `conversation` holds, or -1. */
  held(conversation: number): number {
    return this.#holder.indexOf(conversation);
  }

  /** A free slot for `conversation` (its own if it holds one), or -1 when all are held. */
  acquire(conversation: number): number {
    const own = this.held(conversation);
    if (own >= 0) return own;
    const i = this.#holder.indexOf(-1);
    if (i < 0) return -1;
    this.#holder[i] = conversation;
    if (this.#busy > 0) this.overlapped++;
    this.#busy++;
    if (this.#busy > this.maxBusy) this.maxBusy = this.#busy;
    return i;
  }

  release(slot: number): void {
    if (this.#holder[slot] === -1) return;
    this.#holder[slot] = -1;
    this.#busy--;
  }

  get busy(): number {
    return this.#busy;
  }
}
