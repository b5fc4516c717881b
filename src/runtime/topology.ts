/**
 * The pipeline's shape, derived once from its stage specs (stages/index.ts): each stage's
 * doorbell, every ring with its producer and consumer, the control block's layout, the default
 * CPU placement and the memory categories. Nothing here names a stage: adding one is its spec
 * and its file.
 *
 * Rings are named by what they carry ('mel', 'embed'). The first stage that writes a name
 * creates that ring; the stages after it that read the name consume it. A name no stage wrote
 * before its first reader is written by the main thread ('input'); a ring no stage reads is
 * read by the main thread ('events', 'output'). A stage that both reads and writes a name is
 * spliced into it: the ring up to it keeps the name, the one after it is `<name>.<stage>`.
 *
 * Thread contract: immutable after construction; any thread.
 */
import { ArgumentError } from '../errors.js';
import { registerCategories } from '../memory/layout.js';
import type { ModelConfig } from '../model/format/config.js';
import type { ClockName } from '../core/clock.js';
import type { Environment, Stage } from './stages/stage.js';
import { BELL_MAIN, type ControlLayout } from './protocol.js';

/** Words of a ring's data, from the configuration and the output rate. */
export type RingCapacity = (c: ModelConfig, outputRate: number) => number;

export interface StageSpec {
  readonly name: string;
  /** What it consumes and produces, by ring name, in the order it uses them. */
  readonly reads: readonly string[];
  readonly writes: readonly string[];
  /** Data words of the rings this stage creates (or, for a ring the main thread writes, the first reader). */
  readonly capacities?: Readonly<Record<string, RingCapacity>>;
  /** Pass slots and native helper threads: it takes part in dividing the CPUs. */
  readonly compute: boolean;
  /** A heavy compute stage: it takes the `threads` option (every CPU by default); a light one computes on its own thread unless named in `stageThreads`. */
  readonly heavy?: boolean;
  /** Placement: with fewer CPUs than stages, higher values get a CPU of their own first. */
  readonly pin: number;
  /** The clocks it accumulates per conversation (core/clock.ts). */
  readonly clocks: readonly ClockName[];
  /** Memory categories its arenas charge beyond the model's and the core's. */
  readonly categories?: readonly string[];
  /** URL of the module that exports this spec as `stage` (the generic worker imports it). */
  readonly module: string;
  create(env: Environment): Stage<unknown>;
}

export interface RingSpec {
  /** The ring's own name (`ring.<name>` in the manifest), and the name of what it carries. */
  readonly name: string;
  readonly carries: string;
  readonly producer: number;
  readonly consumer: number;
  readonly capacity: RingCapacity;
}

/** The categories of the audio stages' arenas (capture, and the native audio engines). */
export const AUDIO_CATEGORIES: readonly string[] = ['capture', 'native.audio'];

/** A spec's defaults: no rings, no compute, lowest placement priority, no clocks. */
export function stageDefaults(module: string, name: string, create: StageSpec['create']): StageSpec {
  return { name, module, create, reads: [], writes: [], compute: false, pin: 0, clocks: [] };
}

/** Control words rounded to whole groups of 8, as the five-stage block always was. */
function controlLayout(stages: number): ControlLayout {
  const block = 8 * Math.ceil((stages + 1) / 8);
  const idle = 2 * block + 1;
  return { attention: block, stop: 2 * block, idle, words: 8 * Math.ceil((idle + stages + 1) / 8) };
}

export class Topology {
  readonly stages: readonly StageSpec[];
  readonly names: readonly string[];
  readonly rings: readonly RingSpec[];
  readonly layout: ControlLayout;
  /** Per stage: the ring it reads and writes for each name it uses. */
  readonly #ends = new Map<string, { reads: Record<string, string>; writes: Record<string, string> }>();
  /** The main thread's rings by what they carry. */
  readonly mainWrites: Readonly<Record<string, string>>;
  readonly mainReads: Readonly<Record<string, string>>;

  constructor(stages: readonly StageSpec[]) {
    if (stages.length === 0) throw new ArgumentError('a pipeline needs at least one stage');
    const names = stages.map((s) => s.name);
    for (const [i, n] of names.entries()) {
      if (!/^[a-z][a-z0-9]*$/.test(n)) throw new ArgumentError(`stage name '${n}' must be lowercase letters and digits`);
      if (names.indexOf(n) !== i) throw new ArgumentError(`stage '${n}' appears twice`);
    }
    this.stages = stages;
    this.names = names;
    this.layout = controlLayout(stages.length);
    const rings: { name: string; carries: string; producer: number; consumer: number; capacity: RingCapacity | null }[] = [];
    const current = new Map<string, number>(); // what a ring carries → index of its latest segment
    const mainWrites: Record<string, string> = {};
    const capacityOf = (carries: string, s: StageSpec): RingCapacity | null => s.capacities?.[carries] ?? null;
    for (const [i, s] of stages.entries()) {
      const bell = i + 1;
      const ends = { reads: {} as Record<string, string>, writes: {} as Record<string, string> };
      for (const r of s.reads) {
        let k = current.get(r);
        if (k === undefined) {
          k = rings.push({ name: r, carries: r, producer: BELL_MAIN, consumer: -1, capacity: capacityOf(r, s) }) - 1;
          current.set(r, k);
          mainWrites[r] = r;
        }
        const ring = rings[k]!;
        if (ring.consumer !== -1) throw new ArgumentError(`ring '${ring.name}' has two readers: stages ${names[ring.consumer - 1]} and ${s.name}`);
        ring.consumer = bell;
        ends.reads[r] = ring.name;
      }
      for (const w of s.writes) {
        const k = current.get(w);
        if (k !== undefined && !s.reads.includes(w))
          throw new ArgumentError(`stage ${s.name} writes '${w}', which an earlier stage writes; to pass it through it must read it too`);
        const name = k === undefined ? w : `${w}.${s.name}`;
        const capacity = capacityOf(w, s) ?? (k === undefined ? null : rings[k]!.capacity);
        current.set(w, rings.push({ name, carries: w, producer: bell, consumer: -1, capacity }) - 1);
        ends.writes[w] = name;
      }
      this.#ends.set(s.name, ends);
    }
    const mainReads: Record<string, string> = {};
    for (const r of rings) {
      if (r.capacity === null) throw new ArgumentError(`no stage gives the capacity of ring '${r.name}'`);
      if (r.consumer === -1) {
        r.consumer = BELL_MAIN;
        mainReads[r.carries] = r.name;
      }
    }
    this.rings = rings as RingSpec[];
    this.mainWrites = mainWrites;
    this.mainReads = mainReads;
    for (const s of stages) registerCategories(s.categories ?? []);
  }

  bell(stage: string): number {
    const i = this.names.indexOf(stage);
    if (i < 0) throw new ArgumentError(`no stage '${stage}' (stages: ${this.names.join(', ')})`);
    return i + 1;
  }

  spec(stage: string): StageSpec {
    return this.stages[this.bell(stage) - 1]!;
  }

  /** The rings `stage` reads and writes, by what they carry. */
  ends(stage: string): { reads: Readonly<Record<string, string>>; writes: Readonly<Record<string, string>> } {
    return this.#ends.get(this.spec(stage).name)!;
  }

  /** Data words of every ring, by ring name (what a ring carries has one capacity wherever it is spliced). */
  capacities(c: ModelConfig, outputRate: number): Record<string, number> {
    return Object.fromEntries(this.rings.map((r) => [r.name, r.capacity(c, outputRate)]));
  }

  /** Compute threads per stage: `threads` for the heavy stages, one for the others, unless `named`. */
  threads(threads: number, named: Readonly<Partial<Record<string, number>>> = {}): Record<string, number> {
    return Object.fromEntries(this.stages.map((s) => [s.name, named[s.name] ?? (s.heavy === true ? threads : 1)]));
  }

  /** Stages with pass slots and native helpers. */
  get compute(): string[] {
    return this.stages.filter((s) => s.compute).map((s) => s.name);
  }

  /**
   * The default placement over `cpus`: with as many CPUs as stages, one each in pipeline order;
   * with fewer, the stages of highest `pin` get the last CPUs, one each, and the rest share the
   * first. A compute stage with more threads than one CPU may run on every allowed CPU (its
   * helpers inherit its pin set: helpers sharing one CPU only wait for each other).
   */
  pinMap(cpus: readonly number[], threads: Readonly<Record<string, number>> = {}): Record<string, number[]> {
    const n = cpus.length;
    if (n === 0) return {};
    const map: Record<string, number[]> = {};
    if (n >= this.stages.length) {
      this.stages.forEach((s, i) => {
        map[s.name] = [cpus[i]!];
      });
    } else {
      // Highest priority on the last CPU, the next on the one before, …; the rest on the first.
      const ranked = [...this.stages].sort((a, b) => b.pin - a.pin);
      ranked.forEach((s, r) => {
        map[s.name] = [cpus[Math.max(0, n - 1 - r)]!];
      });
    }
    for (const s of this.stages) if (s.compute && (threads[s.name] ?? 1) > 1) map[s.name] = [...cpus];
    return map;
  }
}
