/**
 * The coordinator: loads the weights image once, starts the five pinned stage workers on the
 * shared memory domain, opens conversations (each worker carves what it keeps of one), seals
 * everything at readiness, and gives the main thread the ends of each conversation's rings.
 *
 * Lifecycle: start (image, workers, their tables and pass slots) → open (rings charged to
 * `session/<n>`, state in each worker charged to `conversation/<n>`) → ready (every arena and
 * owner sealed) → run → close (workers stop and release their slabs; the cap and the ledger
 * return to their baseline).
 *
 * Control calls go over comlink with a timeout; a worker that exits rejects every pending and
 * later call with WorkerError, and `failure` holds that error for the data loops.
 *
 * Thread contract: the main thread only.
 */
import { Worker } from 'node:worker_threads';
import * as Comlink from 'comlink';
import type { Arena } from '../memory/arena.js';
import type { MemoryDomain } from '../memory/domain.js';
import type { Owner } from '../memory/ledger.js';
import type { SlabRecord } from '../memory/slab.js';
import { ArgumentError, CapacityError, ControlTimeoutError, MemoryLimitError, WorkerError, reviveError } from '../errors.js';
import { optionValue } from '../options.js';
import { loadCheckpoint } from '../io/checkpoint.js';
import type { ModelConfig } from '../model/format/config.js';
import type { LoadReport, WeightsImage } from '../model/format/image.js';
import type { TextTokenizer } from '../model/format/tokenizer.js';
import { resolveSpeechOptions, speechSetup, type SpeechModelOptions, type SpeechSetup } from '../core/conversation.js';
import { native } from '../native.js';
import { nodeEndpoint } from './endpoint.js';
import { STAGE_RESOURCE_LIMITS, withWorkerOptions } from '../threads.js';
import { captureMirrored, Doorbells, RecordRing, type SharedRing } from './ring.js';
import { BELL_MAIN, type StageApi, type StageName, type StageReady, type StageStats } from './protocol.js';
import { inputChunk, PIPELINE } from './stages/index.js';
import { borrowModel, type CaptureMirror, carveControl, carveRings, ringArenaBytes } from './carve.js';
import type { StageSpec, Topology } from './topology.js';
import { loadTokenizer } from '../io/config.js';

export type PinMap = Partial<Record<StageName, number[]>>;
/** Compute threads per stage (1–8, as `threads`). */
export type StageThreads = Partial<Record<StageName, number>>;

export interface PipelineOptions extends SpeechModelOptions {
  /** Pass slots per compute stage (default and range: src/options.ts). */
  slots?: number;
  /** Conversations open at once, at most (default and range: src/options.ts). */
  maxConversations?: number;
  /** CPUs per stage, or 'none' to leave affinity alone. Default: `defaultPinMap` of the allowed CPUs. */
  pin?: PinMap | 'none';
  /** Compute threads of the named stages (the others take `threads`). */
  stageThreads?: StageThreads;
  /** Milliseconds a control call may take (default and range: src/options.ts). */
  callTimeoutMs?: number;
  /** Test mode: workers count typed-array and buffer constructions after readiness. */
  trapAllocations?: boolean;
  /** The stages (default: the five of stages/index.ts); a test adds its own. */
  topology?: Topology;
  /** Test hook: a stage's worker exits after handling this many records. */
  exitAfterRecords?: Partial<Record<StageName, number>>;
  /** Test hook (fault injection): a stage worker's allocator fails its n-th slab. */
  failAllocationAt?: Partial<Record<StageName, number>>;
  /** Test hook: the Depthformer stage holds every reply after its first step until this many conversations have one ready. */
  gateReplies?: number;
  /** Test hook (Depthformer stage): the most audio frames of each conversation's n-th reply. */
  replyFrameLimits?: number[];
  /** Test hook (Depthformer stage): ms to stall between a turn's two end records (events, then playback). */
  turnEndPauseMs?: number;
  /** Test hook (Depthformer stage): ms to stall after a reply's first audio frame is sent. */
  firstFramePauseMs?: number;
}

/**
 * The default placement (Topology.pinMap): the heavy compute stages (Conformer, Depthformer) run
 * with a thread per allowed CPU on every one of them (two computing at once divide the CPUs, in
 * the addon's pool); the light stages keep a CPU each by priority (playback first), the rest
 * sharing the first.
 */
export function defaultPinMap(cpus: readonly number[], threads?: StageThreads, topology: Topology = PIPELINE): PinMap {
  return topology.pinMap(cpus, (threads ?? topology.threads(optionValue<number>('threads', undefined))) as Record<string, number>);
}

/** What every stage is built from, besides its domain, image and control block. */
export function stageSettings(setup: SpeechSetup, config: ModelConfig, slots: number) {
  return {
    config,
    options: setup.options,
    maxFrames: setup.maxFrames,
    turnPositions: setup.turnPositions,
    prompts: setup.prompts,
    slots,
  };
}

class StageWorker {
  readonly name: StageName;
  readonly worker: Worker;
  readonly api: Comlink.Remote<StageApi>;
  readonly bell: number;
  readonly #attention: number;
  readonly #bells: Doorbells;
  readonly #timeoutMs: number;
  failure: WorkerError | null = null;
  /** Slabs the worker created: released by the worker on stop, by the coordinator if it died. */
  slabs: SlabRecord[] = [];
  /** Rejecters of the calls in flight: a worker that dies rejects each of them. */
  readonly #pending = new Set<(e: WorkerError) => void>();
  exited = false;

  constructor(
    spec: StageSpec,
    topology: Topology,
    bells: Doorbells,
    timeoutMs: number,
    onFailure: (e: WorkerError) => void,
    onExit: (threadId: number) => void,
  ) {
    const name = spec.name;
    this.name = name;
    this.bell = topology.bell(name);
    this.#attention = topology.layout.attention + this.bell;
    this.#bells = bells;
    this.#timeoutMs = timeoutMs;
    // One generic entry: the stage comes from its spec's module.
    this.worker = withWorkerOptions(
      (o) =>
        new Worker(new URL('../../workers/stage.js', import.meta.url), {
          ...o,
          workerData: { stage: name, module: spec.module },
          resourceLimits: STAGE_RESOURCE_LIMITS,
        }),
    );
    this.api = Comlink.wrap<StageApi>(nodeEndpoint(this.worker as never));
    const fail = (e: WorkerError): void => {
      if (this.failure === null) {
        this.failure = e;
        onFailure(e);
      }
      for (const reject of this.#pending) reject(e);
      this.#pending.clear();
    };
    this.worker.once('error', (err) => fail(new WorkerError(name, `failed: ${err.message}`, { cause: reviveError(err) })));
    const threadId = this.worker.threadId;
    this.worker.once('exit', (code) => {
      this.exited = true;
      onExit(threadId);
      fail(new WorkerError(name, `exited with code ${code}`));
    });
  }

  /** One control call: announced on the attention word, bounded by the timeout and by the worker's life. */
  async call<K extends keyof StageApi>(method: K, ...args: Parameters<StageApi[K]>): Promise<Awaited<ReturnType<StageApi[K]>>> {
    if (this.failure !== null) throw this.failure;
    Atomics.add(this.#bells.words, this.#attention, 1);
    this.#bells.ring(this.bell);
    // One guard per call, settled by the timeout or the worker's death and dropped with the call:
    // racing every call against one long-lived promise would leave a reaction on it per call.
    let timer: NodeJS.Timeout | undefined;
    let rejectGuard: (e: Error) => void = () => undefined;
    const guard = new Promise<never>((_, reject) => {
      rejectGuard = reject;
      timer = setTimeout(
        () => reject(new ControlTimeoutError(`${this.name} worker: '${String(method)}' did not answer in ${this.#timeoutMs} ms`)),
        this.#timeoutMs,
      );
    });
    this.#pending.add(rejectGuard);
    try {
      const fn = this.api[method] as unknown as (...a: unknown[]) => Promise<Awaited<ReturnType<StageApi[K]>>>;
      return await Promise.race([fn(...args), guard]);
    } catch (error) {
      throw reviveError(error);
    } finally {
      clearTimeout(timer);
      this.#pending.delete(rejectGuard);
    }
  }
}

/** The main thread's ends of one conversation's rings. */
export class PipelineConversation {
  readonly index: number;
  /** What admission counted for it: the bytes its open charged to the cap. */
  readonly plannedBytes: number;
  /** Its rings' storage (owner `session/<index>`). */
  readonly arena: Arena;
  readonly seed: number;
  readonly inputRate: number;
  /** Samples per input record. */
  readonly chunk: number;
  readonly input: RecordRing;
  readonly events: RecordRing;
  readonly output: RecordRing;
  /** Every ring of the conversation, by ring name (topology.ts). */
  readonly rings: Readonly<Record<string, RecordRing>>;
  /** The frontend finds its turns (VAD), and barge-in runs through `duplex`. */
  readonly vad: boolean;
  /** Echo cancellation runs in capture (DUPLEX records). */
  readonly echo: boolean;
  /** Barge-in words (protocol.ts, kVoice…): this thread writes kOnsetsSeen, kHeard*, kPlayed*. */
  readonly duplex: Int32Array;
  /** The capture ring's mirrored data (null: the copy-on-wrap ring). */
  readonly mirror: CaptureMirror | null;

  constructor(
    index: number,
    seed: number,
    inputRate: number,
    vad: boolean,
    echo: boolean,
    rings: Record<string, RecordRing>,
    topology: Topology,
    duplex: Int32Array,
    arena: Arena,
    plannedBytes: number,
    mirror: CaptureMirror | null = null,
  ) {
    this.index = index;
    this.mirror = mirror;
    this.vad = vad;
    this.echo = echo;
    this.duplex = duplex;
    this.arena = arena;
    this.plannedBytes = plannedBytes;
    this.seed = seed;
    this.inputRate = inputRate;
    this.chunk = inputChunk(inputRate);
    this.rings = rings;
    this.input = rings[topology.mainWrites.input!]!;
    this.events = rings[topology.mainReads.events!]!;
    this.output = rings[topology.mainReads.output!]!;
  }
}

export class Pipeline {
  readonly dir: string;
  readonly domain: MemoryDomain;
  readonly config: ModelConfig;
  readonly image: WeightsImage;
  readonly report: LoadReport;
  readonly tokenizer: TextTokenizer;
  readonly setup: SpeechSetup;
  readonly slots: number;
  readonly maxConversations: number;
  readonly topology: Topology;
  readonly control: Int32Array;
  readonly bells: Doorbells;
  readonly workers: readonly StageWorker[];
  readonly placement: StageReady[] = [];
  /** The open conversations by index; a closed one's index is used again. */
  readonly conversations = new Map<number, PipelineConversation>();
  /** Opens and closes run one at a time (indices and admission depend on the ones before). */
  #serial: Promise<unknown> = Promise.resolve();
  readonly #arenas: Arena[] = [];
  readonly #releaseImage: () => void;
  /** The first worker failure, if any: every data loop checks it. */
  failure: WorkerError | null = null;
  #ready = false;
  #closed = false;

  private constructor(dir: string, domain: MemoryDomain, options: PipelineOptions) {
    const slots = optionValue('slots', options.slots);
    const timeout = optionValue('callTimeoutMs', options.callTimeoutMs);
    this.dir = dir;
    this.domain = domain;
    this.slots = slots;
    this.maxConversations = optionValue('maxConversations', options.maxConversations);
    this.topology = options.topology ?? PIPELINE;
    const loaded = loadCheckpoint(dir, domain, false);
    this.config = loaded.config;
    this.image = loaded.image;
    this.report = loaded.report;
    this.#releaseImage = loaded.release;
    let arena: Arena;
    try {
      const resolved = resolveSpeechOptions(loaded.config, options);
      this.tokenizer = loadTokenizer(dir, loaded.config.backbone.vocab);
      this.setup = speechSetup(loaded.config, this.tokenizer, resolved);
      ({ arena, control: this.control } = carveControl(domain, this.topology.layout));
    } catch (error) {
      // Nothing of a start that fails here stays held.
      loaded.release();
      throw error;
    }
    this.#arenas.push(arena);
    this.bells = new Doorbells(this.control);
    // A worker that exits inside an accounting write section leaves the lock held: free it.
    const onExit = (threadId: number): void => void domain.ledger.counters.releaseIfHeldBy(threadId);
    this.workers = this.topology.stages.map((spec) => new StageWorker(spec, this.topology, this.bells, timeout, (e) => this.#fail(e), onExit));
  }

  #fail(e: WorkerError): void {
    if (this.#closed) return;
    this.failure ??= e;
    // Wake the main thread's waits so the data loops see the failure at once.
    this.bells.ring(BELL_MAIN);
  }

  /** Loads `dir` and starts the stage workers with their tables and pass slots carved. */
  static async start(dir: string, domain: MemoryDomain, options: PipelineOptions = {}): Promise<Pipeline> {
    const names = (options.topology ?? PIPELINE).names;
    for (const [stage, n] of Object.entries(options.stageThreads ?? {})) {
      if (!names.includes(stage)) throw new ArgumentError(`stageThreads: no stage '${stage}' (stages: ${names.join(', ')})`);
      optionValue('threads', n);
    }
    const p = new Pipeline(dir, domain, options);
    try {
      const threads = p.topology.threads(p.setup.options.threads, options.stageThreads);
      const pin = options.pin === 'none' ? {} : { ...defaultPinMap(native.allowedCpus(), threads, p.topology), ...(options.pin ?? {}) };
      const shared = {
        ...stageSettings(p.setup, p.config, p.slots),
        domain: domain.share(),
        image: p.image.share(),
        control: { buffer: p.control.buffer as unknown as SharedArrayBuffer, byteOffset: p.control.byteOffset },
        trapAllocations: options.trapAllocations === true,
      };
      const placed = await Promise.all(
        p.workers.map((w) =>
          w.call('init', {
            ...shared,
            stage: w.name,
            bell: w.bell,
            layout: p.topology.layout,
            pin: pin[w.name] ?? [],
            threads: threads[w.name]!,
            exitAfterRecords: options.exitAfterRecords?.[w.name] ?? 0,
            failAllocationAt: options.failAllocationAt?.[w.name] ?? 0,
            gateReplies: options.gateReplies ?? 0,
            replyFrameLimits: options.replyFrameLimits ?? [],
            turnEndPauseMs: options.turnEndPauseMs ?? 0,
            firstFramePauseMs: options.firstFramePauseMs ?? 0,
          }),
        ),
      );
      p.placement.push(...placed);
      placed.forEach((r, i) => {
        p.workers[i]!.slabs.push(...r.slabs);
      });
    } catch (error) {
      await p.close();
      throw error;
    }
    return p;
  }

  /** Runs `fn` after every open and close before it. */
  #inTurn<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(fn, fn);
    this.#serial = next.catch(() => undefined);
    return next;
  }

  /**
   * What opening a conversation at `inputRate` would charge to the cap: its rings' slab and
   * each stage's dry run of its open. Nothing is allocated.
   */
  async plannedBytes(inputRate: number, index = this.#freeIndex(), vad = false, echoDelayMs = -1): Promise<number> {
    optionValue('inputRate', inputRate);
    const spec = { index, seed: 0, inputRate, vad, echoDelayMs, capacities: this.topology.capacities(this.config, this.setup.options.outputRate) };
    const stages = await Promise.all(this.workers.map((w) => w.call('size', spec)));
    const mirrored = captureMirrored();
    const rings =
      this.domain.policy.slabFootprint(ringArenaBytes(this.domain.policy, this.topology, spec.capacities, mirrored), 'conversation rings') +
      (mirrored ? 4 * spec.capacities[this.topology.mainWrites.input!]! : 0);
    return stages.reduce((s, b) => s + b, rings);
  }

  /** Refuses conversation `index` (CapacityError) when a fixed table cannot take it: nothing is carved yet. */
  #checkTables(index: number): void {
    if (index >= this.maxConversations)
      throw new CapacityError(
        `the engine holds at most ${this.maxConversations} conversations at once (maxConversations); ${this.conversations.size} are open`,
      );
    const ledger = this.domain.ledger;
    const owners = (['conversation', 'session'] as const).filter((k) => !ledger.registered(k, index)).length;
    if (owners > ledger.freeOwnerSlots())
      throw new CapacityError(
        `the memory ledger's owner table is full (${ledger.ownerCapacity} owners) with ${this.conversations.size} conversations open: ` +
          `conversation ${index} needs ${owners} more`,
      );
  }

  #freeIndex(): number {
    let index = 0;
    while (this.conversations.has(index)) index++;
    return index;
  }

  /**
   * Opens a conversation: admission first (its planned bytes against what the cap has left,
   * refused with MemoryLimitError before anything is carved), then its rings (owner
   * `session/<n>`) and each stage's state for it (owner `conversation/<n>`). Before `ready()`
   * it becomes ready with the pipeline; after, at once, while the others run.
   */
  open(o: { seed: number; inputRate: number; vad?: boolean; echoDelayMs?: number }): Promise<PipelineConversation> {
    return this.#inTurn(() => this.#open(o));
  }

  async #open(o: { seed: number; inputRate: number; vad?: boolean; echoDelayMs?: number }): Promise<PipelineConversation> {
    if (this.#closed) throw new ArgumentError('the pipeline is closed');
    if (this.failure !== null) throw this.failure;
    optionValue('inputRate', o.inputRate);
    const index = this.#freeIndex();
    const capacities = this.topology.capacities(this.config, this.setup.options.outputRate);
    const vad = o.vad === true;
    const echoDelayMs = o.echoDelayMs ?? -1;
    if (!(Number.isInteger(echoDelayMs) && echoDelayMs >= -1 && echoDelayMs <= 500))
      throw new ArgumentError(`echoDelayMs must be an integer 0..500, got ${echoDelayMs}`);
    this.#checkTables(index);
    const planned = await this.plannedBytes(o.inputRate, index, vad, echoDelayMs);
    const snap = this.domain.snapshot();
    const inUse = snap.held.total + snap.reserved;
    if (inUse + planned > snap.limit) throw new MemoryLimitError(planned, inUse, snap.limit, `conversation/${index}`);
    const session = this.domain.owner('session', index);
    const { arena, views, duplex, mirror } = carveRings(this.domain, index, capacities, captureMirrored(), this.topology);
    const opened: StageWorker[] = [];
    try {
      const shared: Record<string, SharedRing> = {};
      const rings: Record<string, RecordRing> = {};
      for (const { name, producer, consumer } of this.topology.rings) {
        const view = views[name]!;
        const s: SharedRing = {
          buffer: view.buffer as unknown as SharedArrayBuffer,
          byteOffset: view.byteOffset,
          capacity: capacities[name]!,
          mirror: name === this.topology.mainWrites.input && mirror !== null ? (mirror.address ?? undefined) : undefined,
        };
        rings[name] = RecordRing.init(s, this.bells, producer, consumer);
        shared[name] = s;
      }
      const byCarried = (ends: Readonly<Record<string, string>>): Record<string, SharedRing> =>
        Object.fromEntries(Object.entries(ends).map(([carries, name]) => [carries, shared[name]!]));
      for (const w of this.workers) {
        opened.push(w);
        const words = { buffer: duplex.buffer as unknown as SharedArrayBuffer, byteOffset: duplex.byteOffset };
        const ends = this.topology.ends(w.name);
        const mine = { reads: byCarried(ends.reads), writes: byCarried(ends.writes) };
        w.slabs.push(...(await w.call('open', { index, seed: o.seed, inputRate: o.inputRate, vad, echoDelayMs, capacities, rings: mine, duplex: words })));
      }
      const conv = new PipelineConversation(index, o.seed, o.inputRate, vad, echoDelayMs >= 0, rings, this.topology, duplex, arena, planned, mirror);
      this.conversations.set(index, conv);
      borrowModel(this.domain, index, true);
      if (this.#ready) {
        arena.seal();
        this.domain.ledger.seal(session);
        this.domain.ledger.seal(this.domain.owner('conversation', index));
      }
      return conv;
    } catch (error) {
      await this.#closeIn(opened, index);
      this.domain.releaseSlab(arena.slab);
      mirror?.release();
      throw error;
    }
  }

  /** Each of `workers` drops conversation `index`; the slabs they made for it go back to the cap. */
  async #closeIn(workers: readonly StageWorker[], index: number): Promise<void> {
    const mine = (r: SlabRecord): boolean => r.owner.kind === 'conversation' && r.owner.index === index;
    for (const w of workers) {
      if (w.failure === null && !w.exited) {
        const closed = await w.call('close', index).then(
          () => true,
          () => false,
        );
        if (closed) w.slabs = w.slabs.filter((r) => !mine(r));
      }
      // A dead worker's slabs are returned by close() (releaseOrphan) with the rest.
    }
  }

  /**
   * Closes one conversation while the others run: every stage drops it (a pass it held ends),
   * its rings and state go back to the cap, and its owners may be set up again. The main
   * thread must not touch its rings afterwards.
   */
  closeConversation(conv: PipelineConversation): Promise<void> {
    return this.#inTurn(async () => {
      if (this.#closed || this.conversations.get(conv.index) !== conv) return;
      this.conversations.delete(conv.index);
      borrowModel(this.domain, conv.index, false);
      await this.#closeIn(this.workers, conv.index);
      // The mapping itself goes when the last thread's view of it is collected.
      conv.mirror?.release();
      if (this.workers.some((w) => w.exited || w.failure !== null)) {
        // Its slabs in a dead worker are returned by close(); the arena and owners then too.
        this.#arenas.push(conv.arena);
        return;
      }
      this.domain.releaseSlab(conv.arena.slab);
      for (const o of [this.domain.owner('conversation', conv.index), this.domain.owner('session', conv.index)]) {
        if (this.domain.ledger.isSealed(o)) this.domain.ledger.unseal(o);
      }
    });
  }

  /** Readiness: every worker seals its arenas, then every owner is sealed; the stages start. */
  async ready(): Promise<void> {
    await this.#inTurn(async () => {
      for (const w of this.workers) await w.call('ready');
      for (const a of this.#arenas) a.seal();
      for (const c of this.conversations.values()) c.arena.seal();
      for (const o of this.#owners()) this.domain.ledger.seal(o);
      this.#ready = true;
      for (const w of this.workers) await w.call('start');
    });
  }

  /** Each stage's clocks, pass-slot use and allocation trap counts. */
  async stats(): Promise<StageStats[]> {
    return Promise.all(this.workers.map((w) => w.call('stats')));
  }

  /**
   * Waits (without blocking the event loop) until the main doorbell moves past `seen` or
   * `ms` pass. Read `seen` with `bells.read(BELL_MAIN)` before checking the rings.
   */
  /**
   * Whether every stage has nothing to do: each sleeps on the bell value it found no work at,
   * and none has been rung since (a ring is how any work reaches a stage). The main thread's
   * own work is the caller's to check. Lockstep devices (io/loopback.ts) tick only then.
   */
  quiet(): boolean {
    const at = this.topology.layout.idle;
    for (const w of this.workers) {
      const bell = w.bell;
      const idle = Atomics.load(this.control, at + bell);
      if (idle === 0 || idle !== Atomics.load(this.control, bell) + 1) return false;
    }
    return true;
  }

  /**
   * Blocks the calling thread until the main doorbell moves past `seen` or `ms` pass: cheaper per
   * wake-up than `wait`, for a main thread with nothing else to run. Worker exits and errors reach
   * `failure` through the event loop, so the caller must yield to it between blocking waits.
   */
  block(seen: number, ms: number): void {
    Atomics.wait(this.control, BELL_MAIN, seen, ms);
  }

  async wait(seen: number, ms: number): Promise<void> {
    const r = (
      Atomics as unknown as { waitAsync(a: Int32Array, i: number, v: number, t: number): { async: boolean; value: Promise<string> | string } }
    ).waitAsync(this.control, BELL_MAIN, seen, ms);
    if (r.async) await r.value;
  }

  /** Stops every stage; each worker returns its slabs to the cap; the workers end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    Atomics.store(this.control, this.topology.layout.stop, 1);
    for (const w of this.workers) {
      for (let b = 0; b < this.topology.layout.words; b++) Atomics.notify(this.control, b);
      if (!w.exited && w.failure === null) {
        const stopped = await w.call('stop').then(
          () => true,
          () => false,
        );
        if (stopped) w.slabs = [];
      }
    }
    await Promise.all(this.workers.map((w) => w.worker.terminate()));
    // A worker that died (or could not stop) took its Slab objects with it: return its charges.
    for (const w of this.workers) {
      for (const r of w.slabs) this.domain.releaseOrphan(r);
      w.slabs = [];
    }
    for (const a of this.#arenas) this.domain.releaseSlab(a.slab);
    for (const c of this.conversations.values()) {
      this.domain.releaseSlab(c.arena.slab);
      c.mirror?.release();
      borrowModel(this.domain, c.index, false);
    }
    this.#releaseImage();
    // Every owner this pipeline set up holds nothing now: it may be set up again.
    if (this.#ready) for (const o of this.#owners()) if (this.domain.ledger.isSealed(o)) this.domain.ledger.unseal(o);
    this.conversations.clear();
  }

  /** The owners a pipeline sets up and seals. */
  #owners(): Owner[] {
    const d = this.domain;
    const conversations = [...this.conversations.keys(), ...this.#arenas.filter((a) => a.slab.owner.kind === 'session').map((a) => a.slab.owner.index)];
    return [
      d.owner('model', 0),
      ...Array.from({ length: this.slots }, (_, i) => d.owner('ticket', i)),
      ...conversations.flatMap((i) => [d.owner('conversation', i), d.owner('session', i)]),
    ];
  }
}
