/**
 * Async iterators over a stream of events: each `open()` iterator sees every event pushed after
 * it opened, in order, until `end()`; one closed early (`return`) stops receiving.
 *
 * Thread contract: one thread.
 */
export class EventIterators<E> {
  readonly #sinks = new Set<(e: E | null) => void>();

  /** Whether any iterator is listening. */
  get listening(): boolean {
    return this.#sinks.size > 0;
  }

  /** A new iterator (already ended when `ended`). */
  open(ended = false): AsyncIterableIterator<E> {
    const buffered: (E | null)[] = [];
    let wake: (() => void) | null = null;
    const push = (e: E | null): void => {
      buffered.push(e);
      wake?.();
    };
    if (ended) buffered.push(null);
    else this.#sinks.add(push);
    const it: AsyncIterableIterator<E> = {
      next: async () => {
        while (buffered.length === 0) await new Promise<void>((r) => (wake = r));
        wake = null;
        const e = buffered.shift()!;
        if (e === null) {
          buffered.push(null);
          return { done: true, value: undefined };
        }
        return { done: false, value: e };
      },
      return: async () => {
        this.#sinks.delete(push);
        return { done: true, value: undefined };
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }

  push(e: E): void {
    for (const sink of this.#sinks) sink(e);
  }

  /** Every iterator ends. */
  end(): void {
    for (const sink of this.#sinks) sink(null);
    this.#sinks.clear();
  }
}
