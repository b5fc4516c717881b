/**
 * What every pipeline stage shares. Each is built once in its worker (tables and pass slots
 * carved and sealed before the first record), opens conversations (their state carved in the
 * worker that uses it), and then `poll()`s: it handles every record its input rings hold and its
 * output rings have room for, and returns whether it made progress. A stage never blocks inside
 * `poll`; a full output ring leaves the input record where it is. Each stage's file exports its
 * spec (topology.ts) as `stage`.
 *
 * Thread contract: a stage lives in one worker thread. After `ready()`, `poll()` allocates
 * nothing and never throws for the data (bad audio was refused at the edge).
 */
import type { Arena } from '../../memory/arena.js';
import type { MemoryDomain } from '../../memory/domain.js';
import type { OwnerKind } from '../../memory/layout.js';
import { InternalError } from '../../errors.js';
import { plannedFootprint, sizedArenas } from '../../memory/sizing.js';
import { arenaWorkspace, type Workspace } from '../../dsp/workspace.js';
import type { ModelConfig } from '../../model/format/config.js';
import type { WeightsImage } from '../../model/format/image.js';
import { plannerFor } from '../../core/conversation.js';
import { CLOCK_FRONTEND, CLOCKS, carveClocks, Stopwatch, type StageClocks } from '../../core/clock.js';
import type { Planner } from '../../memory/planner.js';
import { setComputeThreads } from '../../model/blocks/kernels.js';
import { type Doorbells, RecordRing, ringBytes, type SharedRing } from '../ring.js';
import {
  REC_END_SEGMENT,
  REC_PCM,
  DUPLEX_WORDS,
  REC_DUPLEX,
  REC_PCM_ECHO,
  type RingName,
  type StageInit,
  type StageConversation,
  type StageName,
  type StageOpen,
  type BatchingStats,
} from '../protocol.js';
import { TicketPool } from '../tickets.js';
import type { ApmEngine } from '../../dsp/aec.js';
import type { ApmHandle } from '../../native.js';

import '../../core/categories.js';

/** Stands in for a native audio engine in a sizing run (nothing calls it). */
export const SIZING_ENGINE: ApmEngine = { handle: null as unknown as ApmHandle, heapBytes: 0 };

/** Data words of the ring `o` has for what `name` carries (its capacities come from the topology). */
export function capacity(o: StageConversation, name: RingName): number {
  const words = o.capacities[name];
  if (words === undefined) throw new InternalError(`conversation ${o.index} has no ring for '${name}'`);
  return words;
}

export interface Environment {
  domain: MemoryDomain;
  image: WeightsImage;
  init: StageInit;
  bells: Doorbells;
}

let idleRing: RecordRing | null = null;
let idleWords: Int32Array | null = null;
/** The buffers a conversation without echo cancellation does not have. */
export const NONE = new Float32Array(0);
/** Longest a stage sleeps before it looks again without being rung. */
export const IDLE_POLL_MS = 1000;

/** What every stage shares: its clocks, its arenas, and the conversations it serves. */
export abstract class Stage<C> {
  readonly name: StageName;
  readonly env: Environment;
  readonly config: ModelConfig;
  /** Per conversation: wall ms and count per clock, in CLOCKS order (as the single-thread run). */
  readonly clocks: (StageClocks | undefined)[] = [];
  readonly arenas: Arena[] = [];
  /** By conversation index; a closed conversation leaves a hole its index may fill again. */
  readonly conversations: (C | undefined)[] = [];
  /** The arenas each open conversation's state lives in. */
  readonly #owned = new Map<number, Arena[]>();
  /** While sizing: the footprint the conversation's carve would charge. */
  #sizing: { bytes: number } | null = null;
  /** Native engines each open conversation holds: freed, then given back, at its close. */
  readonly #natives = new Map<number, { free(): void; release(): void }[]>();
  /** How pass buffers are laid out (planned, or separate for comparison). */
  readonly planner: Planner;
  /** Records handled, and non-finite input samples taken as silence. */
  records = 0;
  nonFinite = 0;
  readonly #watch = new Stopwatch();

  constructor(name: StageName, env: Environment) {
    this.name = name;
    this.env = env;
    this.config = env.init.config;
    this.planner = plannerFor(env.init.options.layout);
  }

  /** The clocks of conversation `index`, carved in its arena when it opens. */
  protected clocksFor(index: number, arena: Arena): StageClocks {
    const c = carveClocks(arena, `${this.name}.`);
    this.clocks[index] = c;
    return c;
  }

  protected tic(): void {
    this.#watch.tic();
  }

  protected toc(conversation: number, clock: number): void {
    this.#watch.toc(this.clocks[conversation]!, clock);
  }

  /** Ends a section the first `m` conversations of `batch` shared: each gets 1/m of it. */
  protected tocShared(batch: readonly RoomConv[], m: number, clock: number): void {
    this.#watch.stop();
    for (let r = 0; r < m; r++) this.#watch.share(this.clocks[batch[r]!.index]!, clock, m);
  }

  /** Conversation `o`'s barge-in words (protocol.ts, kVoice…); a plan's conversations share idle ones. */
  protected words(o: StageConversation & { duplex?: StageOpen['duplex'] }): Int32Array {
    if (o.duplex !== undefined) return new Int32Array(o.duplex.buffer, o.duplex.byteOffset, DUPLEX_WORDS);
    if (!this.env.domain.unbacked) throw new InternalError(`${this.name} stage: barge-in words used while sizing conversation ${o.index}`);
    idleWords ??= new Int32Array(new SharedArrayBuffer(4 * DUPLEX_WORDS));
    return idleWords;
  }

  /** The ring conversation `o` reads what `name` carries from (an idle ring while planning). */
  protected input(o: StageConversation & { rings?: StageOpen['rings'] }, name: RingName): RecordRing {
    return this.#ring(o, name, o.rings?.reads[name]);
  }

  /** The ring conversation `o` writes what `name` carries to (an idle ring while planning). */
  protected output(o: StageConversation & { rings?: StageOpen['rings'] }, name: RingName): RecordRing {
    return this.#ring(o, name, o.rings?.writes[name]);
  }

  #ring(o: StageConversation & { rings?: StageOpen['rings'] }, name: RingName, shared: SharedRing | undefined): RecordRing {
    // A plan (unbacked domain) builds conversations that never run: they get one idle ring.
    if (o.rings === undefined && this.env.domain.unbacked) {
      idleRing ??= RecordRing.init({ buffer: new SharedArrayBuffer(ringBytes(4)), byteOffset: 0, capacity: 4 }, this.env.bells, 0, 0);
      return idleRing;
    }
    if (shared === undefined) throw new InternalError(`${this.name} stage: no ring '${name}' for conversation ${o.index}`);
    return new RecordRing(shared, this.env.bells);
  }

  /**
   * Carves `build`'s regions in arenas sized exactly by a dry run, kept for sealing (and, for a
   * conversation's arenas, for its close). While sizing, only the dry run happens, and `open`
   * stops there.
   */
  protected carve<T>(arenas: { owner: { kind: OwnerKind; index: number }; name: string }[], bound: number, build: (a: Arena[]) => T): T {
    const d = this.env.domain;
    const specs = arenas.map((a) => ({ owner: d.owner(a.owner.kind, a.owner.index), name: a.name }));
    if (this.#sizing !== null) {
      this.#sizing.bytes += plannedFootprint(d, specs, bound, build);
      throw SIZED;
    }
    const { value, arenas: real } = sizedArenas(d, specs, bound, build);
    this.arenas.push(...real);
    for (const [i, a] of arenas.entries()) {
      if (a.owner.kind !== 'conversation') continue;
      const list = this.#owned.get(a.owner.index) ?? [];
      list.push(real[i]!);
      this.#owned.set(a.owner.index, list);
    }
    return value;
  }

  /** What opening `o` would charge to the cap: its carve's dry run alone. */
  size(o: StageConversation): number {
    if (this.conversations[o.index] !== undefined) throw new InternalError(`${this.name} stage: conversation ${o.index} is open`);
    const sizing = { bytes: 0 };
    this.#sizing = sizing;
    try {
      this.open(o);
      throw new InternalError(`${this.name} stage: opening conversation ${o.index} carved nothing`);
    } catch (error) {
      if (error !== SIZED) throw error;
    } finally {
      this.#sizing = null;
      this.clocks[o.index] = undefined;
      this.conversations[o.index] = undefined;
    }
    return sizing.bytes;
  }

  /**
   * A native engine for conversation `index`, its host heap held under the cap at `bound`
   * (category `native.audio`) until the conversation closes; while sizing, only the bound counts
   * and nothing is made (null).
   */
  protected holdNative<T>(index: number, bound: number, make: () => T, free: (value: T) => void): T | null {
    if (this.#sizing !== null) {
      this.#sizing.bytes += bound;
      return null;
    }
    const d = this.env.domain;
    const h = d.holdNative(d.owner('conversation', index), 'native.audio', bound, make, () => bound);
    const list = this.#natives.get(index) ?? [];
    // A planning domain charges the bound and makes nothing (null): there is nothing to free.
    list.push({ free: () => h.value !== null && free(h.value), release: () => h.release() });
    this.#natives.set(index, list);
    return h.value;
  }

  #releaseNatives(index: number): void {
    for (const n of this.#natives.get(index) ?? []) {
      n.free();
      n.release();
    }
    this.#natives.delete(index);
  }

  /** Drops conversation `index`: what it holds here goes back to the cap. */
  close(index: number): void {
    this.#releaseNatives(index);
    this.drop(index);
    this.conversations[index] = undefined;
    this.clocks[index] = undefined;
    const owned = this.#owned.get(index) ?? [];
    this.#owned.delete(index);
    for (const a of owned) {
      this.arenas.splice(this.arenas.indexOf(a), 1);
      this.env.domain.releaseSlab(a.slab);
    }
  }

  /** Lets go of what a closing conversation holds besides its arenas (a pass slot). */
  protected drop(_index: number): void {}

  /** Pass slots, each carved in its own `ticket/<n>` arena; the stage's tables in `model`. */
  protected slots<T>(bound: number, build: (work: Arena, derived: Workspace, slot: number) => T): TicketPool<T> {
    const n = this.env.init.slots;
    const out: T[] = [];
    const specs: { owner: { kind: OwnerKind; index: number }; name: string }[] = [{ owner: { kind: 'model', index: 0 }, name: `model derived ${this.name}` }];
    for (let i = 0; i < n; i++) specs.push({ owner: { kind: 'ticket' as const, index: i }, name: `ticket ${i} ${this.name}` });
    const built = this.carve(specs, bound, (arenas) => {
      const derived = sharedTables(arenaWorkspace(arenas[0]!, 'derived', this.name));
      const list: T[] = [];
      for (let i = 0; i < n; i++) list.push(build(arenas[i + 1]!, derived.next(), i));
      return list;
    });
    out.push(...built);
    return new TicketPool(out);
  }

  /** Builds conversation `o`'s state; while sizing `o` has no rings and the carve ends it. */
  abstract open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void;
  abstract poll(): boolean;

  /** Called when a poll found nothing to do, before the stage sleeps: how long it may sleep (ms). */
  idle(): number {
    return IDLE_POLL_MS;
  }

  ready(): void {
    for (const a of this.arenas) a.seal();
  }

  /**
   * Milliseconds this stage spends on one generated frame of each of `rows[i]` conversations
   * at once, timed on conversation `index` (opened for it and closed after: its state is left
   * unusable); empty for a stage a frame does not pass through. Before readiness only: it
   * allocates.
   */
  calibrate(_index: number, _rows: readonly number[]): number[] {
    return [];
  }

  /** Per conversation, the clocks this stage ran (CLOCKS names). */
  clockReport(): Record<string, { ms: number; count: number }>[] {
    return this.clocks.map((c) => {
      const r: Record<string, { ms: number; count: number }> = {};
      if (c === undefined) return r;
      CLOCKS.forEach((n, i) => {
        if ((c.count[i] as number) > 0) r[n] = { ms: c.ms[i] as number, count: c.count[i] as number };
      });
      return r;
    });
  }

  /**
   * The loop of a stage that takes its input one record at a time: a record is taken only when
   * the output ring has `room` for what it may produce, and `record` may leave it in place
   * (false) until it can be handled. Indexed, not for-of: an iterator would allocate whenever
   * this code runs unoptimised. A worker runs one stage class, so `record` is monomorphic there;
   * the per-stage heap probes (test/pipeline/stages.test.ts) hold this loop to zero growth.
   */
  protected pollRecords(conversations: readonly (RoomConv | undefined)[]): boolean {
    let progress = false;
    for (let k = 0; k < conversations.length; k++) {
      const c = conversations[k];
      if (c === undefined) continue;
      for (;;) {
        const kind = c.input.peekKind();
        if (kind < 0 || !c.out.canWrite(c.room) || !this.record(c, kind)) break;
        this.records++;
        progress = true;
      }
    }
    return progress;
  }

  /** Handles the record of `kind` at the head of `c.input`; false leaves it there. */
  protected record(_c: RoomConv, _kind: number): boolean {
    return false;
  }

  /** The batching counters of StageStats (zero where a stage batches nothing). */
  batching(): BatchingStats {
    return {
      batchedSteps: 0,
      batchedRows: 0,
      widestBatch: 0,
      batchedTextHeads: 0,
      batchedFrames: 0,
      systemCopies: 0,
      speculations: 0,
      speculationsKept: 0,
      deferredPasses: 0,
      overduePasses: 0,
    };
  }

  /** Pass-slot use; capture and frontend have no pass slots. */
  slotStats(): { count: number; maxBusy: number; overlapped: number } {
    return { count: 0, maxBusy: 0, overlapped: 0 };
  }
}

/** Ends a sizing `open` at its carve (not an error: `Stage.size` catches it). */
const SIZED: unique symbol = Symbol('sized');

/**
 * Formula tables shared by every pass slot: the first slot's build carves them; each later
 * slot's build asks for tables by the same names and gets the first slot's views (and writes
 * the same values into them, at setup). Charged once, to `model`.
 */
function sharedTables(ws: Workspace): { next(): Workspace } {
  // By name, in request order: what slot 0 asked for (a sizing run's views may be empty).
  const made = new Map<string, { type: unknown; length: number; view: ReturnType<Workspace> }[]>();
  let round = 0;
  return {
    next(): Workspace {
      const r = round++;
      const seen = new Map<string, number>();
      return ((name, type, length) => {
        const k = seen.get(name) ?? 0;
        seen.set(name, k + 1);
        const list = made.get(name) ?? [];
        made.set(name, list);
        if (r === 0) {
          const view = ws(name, type, length);
          list.push({ type, length, view });
          return view;
        }
        const m = list[k];
        if (m === undefined || m.length !== length || m.type !== type) {
          throw new InternalError(`pass slot ${r} asked for table '${name}' that slot 0 did not build`);
        }
        return m.view;
      }) as Workspace;
    },
  };
}

/** A conversation as a stage sees it: the ring it reads and the ring it writes. */
export interface RingConv {
  index: number;
  input: RecordRing;
  out: RecordRing;
}

/** A conversation whose output may need up to `room` words per input record. */
export interface RoomConv extends RingConv {
  /** Output words one input record (or the segment's end) may need. */
  room: number;
}

/**
 * A stage that turns each input record into at most one output record (capture, frontend):
 * PCM records go to `pcm` (PCM_ECHO too, flagged), DUPLEX records to `duplex`, a segment's end
 * to `endSegment` (which flushes), anything else is dropped. A record is only taken when the
 * output ring has room for what it may produce.
 */
export abstract class StreamStage<C extends RoomConv> extends Stage<C> {
  /** Handles the PCM record at the head of `c.input` (and consumes it); `echo`: a PCM_ECHO record. */
  protected abstract pcm(c: C, echo: boolean): void;
  /** Handles the DUPLEX record at the head of `c.input` (and consumes it). */
  protected duplex(c: C): void {
    c.input.skip();
  }
  /** Flushes what the segment left; true to write the end-of-segment record after it. */
  protected abstract endSegment(c: C): boolean;

  poll(): boolean {
    return this.pollRecords(this.conversations);
  }

  protected override record(c: C, kind: number): boolean {
    this.tic();
    if (kind === REC_PCM || kind === REC_PCM_ECHO) {
      this.pcm(c, kind === REC_PCM_ECHO);
    } else if (kind === REC_DUPLEX) {
      this.duplex(c);
    } else {
      c.input.skip();
      if (kind === REC_END_SEGMENT && this.endSegment(c)) c.out.write(REC_END_SEGMENT, null, 0, 0);
    }
    this.toc(c.index, CLOCK_FRONTEND);
    return true;
  }
}

/**
 * A compute stage: its pass slots are built once per stage, the first slot's tables shared, and
 * its worker thread gets helper threads of its own for the row-by-row layers.
 */
export abstract class PassStage<C, T> extends Stage<C> {
  readonly tickets: TicketPool<T>;

  constructor(name: StageName, env: Environment, build: (stage: PassStage<C, T>, work: Arena, derived: Workspace, slot: number) => T) {
    super(name, env);
    setComputeThreads(env.init.threads);
    this.tickets = this.slots(1 << 30, (work, derived, slot) => build(this, work, derived, slot));
  }

  override slotStats(): { count: number; maxBusy: number; overlapped: number } {
    return { count: this.tickets.slots.length, maxBusy: this.tickets.maxBusy, overlapped: this.tickets.overlapped };
  }

  protected override drop(index: number): void {
    const slot = this.tickets.held(index);
    if (slot >= 0) this.tickets.release(slot);
  }
}

/** Keeps a segment's mel rows, then normalises, encodes and sends adapter rows as the ring has room. */
