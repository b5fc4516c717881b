import { ArgumentError } from '../errors.js';
import type { BufferSpec } from './planner.js';

export interface WriteSpec {
  name: string;
  bytes: number;
  /** Element layout tag, for in-place checks. */
  layout?: string;
  /** Take the bytes of this input in place (element-wise ops), if the planner's rules allow. */
  inPlaceOf?: string;
  /** A stage output: lives until the end of the pass and is never given away. */
  output?: boolean;
}

/**
 * Describes a pass as a sequence of ops and derives every buffer's exact lifetime from it:
 * first use = the op that produces it, last use = the last op that reads it. Names declared
 * `external` (the stage's inputs, owned elsewhere) are read but not planned; `state` buffers
 * live for the whole pass and may be updated in place by any op.
 */
export class PassBuilder {
  readonly #specs = new Map<string, BufferSpec & { consumers: number }>();
  readonly #external = new Set<string>();
  readonly #ops: string[] = [];

  external(...names: string[]): this {
    for (const n of names) this.#external.add(n);
    return this;
  }

  /** A buffer that lives for the whole pass (e.g. the residual stream). */
  state(name: string, bytes: number, layout = ''): this {
    this.#declare({ name, bytes, firstUse: 0, lastUse: 0, wholePass: true, layout, consumers: 0 });
    return this;
  }

  /** Adds an op reading `reads` and producing `writes`; returns its index. */
  op(label: string, reads: readonly string[], writes: readonly WriteSpec[] = []): number {
    const at = this.#ops.length;
    this.#ops.push(label);
    for (const r of reads) {
      if (this.#external.has(r)) continue;
      const s = this.#specs.get(r);
      if (s === undefined) throw new ArgumentError(`pass: op '${label}' reads '${r}' before any op produces it`);
      s.lastUse = Math.max(s.lastUse, at);
      s.consumers += 1;
    }
    for (const w of writes) {
      const spec: BufferSpec & { consumers: number } = { name: w.name, bytes: w.bytes, firstUse: at, lastUse: at, layout: w.layout ?? '', consumers: 0 };
      if (w.inPlaceOf !== undefined) spec.inPlaceOf = w.inPlaceOf;
      if (w.output === true) spec.output = true;
      this.#declare(spec);
    }
    return at;
  }

  get ops(): readonly string[] {
    return this.#ops;
  }

  /** The planner's input. Outputs are extended to the last op. */
  build(): BufferSpec[] {
    const last = Math.max(0, this.#ops.length - 1);
    return [...this.#specs.values()].map((s) => {
      const out: BufferSpec = { ...s, consumers: s.consumers };
      if (s.output === true || s.wholePass === true) out.lastUse = last;
      return out;
    });
  }

  #declare(spec: BufferSpec & { consumers: number }): void {
    if (this.#specs.has(spec.name) || this.#external.has(spec.name)) throw new ArgumentError(`pass: buffer '${spec.name}' is produced twice`);
    if (!Number.isSafeInteger(spec.bytes) || spec.bytes < 0) throw new ArgumentError(`pass: buffer '${spec.name}' has bytes ${spec.bytes}`);
    this.#specs.set(spec.name, spec);
  }
}
