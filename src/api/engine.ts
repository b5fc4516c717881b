/**
 * The library API: `load()` a model under a memory cap into an Engine (the five pinned stage
 * workers), `engine.open()` conversations on it while others run, talk to each through push
 * methods, a Node Duplex stream, typed events or an async iterator, and `close()` both to
 * return every byte to the cap.
 *
 * A turn is the user's speech up to `endTurn()` (or the longest segment, `segmentSeconds`,
 * whichever comes first), or, in VAD mode, what the frontend stage's endpointer finds; the reply
 * streams out as it is generated. Speech written while a reply is being generated becomes the
 * next turn.
 *
 * The stages allocate nothing once a conversation is ready. This thread hands the application
 * copies: one typed array per block of input it queues and per block of reply audio it emits.
 *
 * Thread contract: one thread (the application's); the stages run in their own workers.
 */
import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import { ArgumentError, CapacityError, ClosedError, MemoryLimitError, UnsupportedError } from '../errors.js';
import { apmAvailable } from '../dsp/aec.js';
import { native } from '../native.js';
import { MemoryDomain } from '../memory/domain.js';
import type { MemoryManifest } from '../memory/manifest.js';
import type { MemorySnapshot } from '../memory/snapshot.js';
import { optionValue } from '../options.js';
import { resolveModel } from '../io/checkpoint.js';
import { BUILTIN_NAMES, type ModelConfig } from '../model/format/config.js';
import type { SpeechModelOptions } from '../core/conversation.js';
import type { DuplexDevice } from '../core/session.js';
import { Pipeline, type PinMap, type PipelineConversation, type StageThreads } from '../runtime/coordinator.js';
import { BELL_MAIN } from '../runtime/protocol.js';
import { calibrate, type ComputeCapacity, frameCostMs, givenCapacity } from '../runtime/capacity.js';
import { ledgerOwners } from '../runtime/carve.js';
import { Conversation, type ConversationOptions } from './conversation.js';
import { aborted, isAborted, kAttach, kDetach, kFail, kPump } from './host.js';
import { type DeviceHost, type DeviceLink, driveTogether } from './device.js';

export type { ConversationEvent, ConversationEvents, ConversationOptions, ConversationSettings, SampleFormat, TurnSummary } from './conversation.js';
export type { DeviceLink } from './device.js';
export { Conversation } from './conversation.js';

export interface EngineOptions extends SpeechModelOptions {
  /** The cap on every byte the engine holds: bytes, or a size such as '2GiB'. Default: VOXSLAB_MEMORY_LIMIT, else the machine's memory. */
  memoryLimit?: number | string;
  /** Run in this memory domain instead of a new one (its cap applies). */
  domain?: MemoryDomain;
  /** Pass slots per compute stage. */
  slots?: number;
  /**
   * Conversations open at once, at most (default 64): the memory ledger's owner table is sized
   * for them, and one more is refused with CapacityError before anything is carved.
   */
  maxConversations?: number;
  /** CPUs per stage, or 'none' to leave thread affinity alone. */
  pin?: PinMap | 'none';
  /** Compute threads of the named stages (the others take `threads`). */
  stageThreads?: StageThreads;
  /** Milliseconds a control call to a stage worker may take. */
  callTimeoutMs?: number;
  /**
   * Conversations admitted at once by compute. Default: measured while loading (a short
   * calibration of a generated frame on the stage workers: `engine.capacity`).
   */
  capacity?: number;
  /** Aborts loading (the workers stop and every byte is returned). */
  signal?: AbortSignal;
  /** Progress lines (generating a built-in checkpoint on first use). Default: none. */
  log?: (line: string) => void;
}

/** @internal Test hooks of an engine's stage workers: not options an application sets. */
export interface EngineTestHooks {
  /** Every stage worker traps typed-array and buffer constructors after readiness (`pipeline.stats()` counts them). */
  trapAllocations?: boolean;
  /** The most audio frames of each conversation's n-th reply. */
  replyFrameLimits?: number[];
}

/** @internal `load` with test hooks (the suite's). */
export function loadWithHooks(model: string, options: EngineOptions, hooks: EngineTestHooks): Promise<Engine> {
  return startEngine(model, options, hooks);
}

/** Loads `model` into the stage workers, with the suite's hooks (none for an application). */
async function startEngine(model: string, options: EngineOptions, hooks: EngineTestHooks): Promise<Engine> {
  if (typeof model !== 'string' || model === '') {
    const got =
      model === null ? 'null' : typeof model === 'object' ? 'an object (options go second: load(model, options))' : (JSON.stringify(model) ?? typeof model);
    throw new ArgumentError(`load: the model is a string, a built-in name (${BUILTIN_NAMES.join(', ')}) or a checkpoint folder; got ${got}`);
  }
  const { memoryLimit, domain: inDomain, slots, maxConversations, pin, stageThreads, callTimeoutMs, signal, log, capacity: cap, ...speech } = options;
  const { trapAllocations, replyFrameLimits } = hooks;
  if (signal?.aborted === true) throw aborted(signal, 'loading');
  const dir = resolveModel(model, log ?? (() => undefined));
  const most = optionValue<number>('maxConversations', maxConversations);
  const ownerCapacity = ledgerOwners(optionValue<number>('slots', slots), most);
  const domain = inDomain ?? MemoryDomain.create(memoryLimit === undefined ? { ownerCapacity } : { limit: memoryLimit, ownerCapacity });
  const po: Parameters<typeof Pipeline.start>[2] = { ...speech, maxConversations: most };
  if (slots !== undefined) po.slots = slots;
  if (pin !== undefined) po.pin = pin;
  if (stageThreads !== undefined) po.stageThreads = stageThreads;
  if (callTimeoutMs !== undefined) po.callTimeoutMs = callTimeoutMs;
  if (trapAllocations === true) po.trapAllocations = true;
  if (replyFrameLimits !== undefined) po.replyFrameLimits = replyFrameLimits;
  const given = cap === undefined ? undefined : optionValue<number>('capacity', cap);
  const pipeline = await Pipeline.start(dir, domain, po);
  let capacity: ComputeCapacity;
  try {
    capacity = given === undefined ? await measuredCapacity(pipeline) : givenCapacity(pipeline, given);
    signal?.throwIfAborted();
    await pipeline.ready();
    // The signal may have fired while the workers were starting.
    signal?.throwIfAborted();
  } catch (error) {
    await pipeline.close();
    throw signal !== undefined && isAborted(signal) ? aborted(signal, 'loading') : error;
  }
  return new Engine(pipeline, capacity);
}

/** The calibration's capacity; when a conversation does not fit under the cap now, no bound but the bytes'. */
async function measuredCapacity(p: Pipeline): Promise<ComputeCapacity> {
  try {
    return await calibrate(p);
  } catch (error) {
    if (!(error instanceof MemoryLimitError || error instanceof CapacityError)) throw error;
    return { ...givenCapacity(p, p.maxConversations), measured: false };
  }
}

/** A model loaded into the five stage workers, ready to open conversations. */
/**
 * The process's resident memory as the runtime sees it beside the ledger: what each thread's
 * JavaScript runtime holds (not charged to any owner: it is not voxslab's to plan), what of the
 * ledger's slabs is resident, and the rest.
 */
export interface RuntimeMemory {
  /** Per thread: V8's committed heap pages, and what V8 allocated outside the heap for it. */
  threads: { thread: string; heapCommitted: number; malloced: number }[];
  /** The threads' runtime bytes together. */
  runtime: number;
  /** Resident bytes of the ledger's slabs (weights, workspaces, conversations, rings). */
  ledgerResident: number;
  /** Resident pages mapped from files: Node's and the libraries' code and read-only data (Linux; 0 elsewhere). */
  files: number;
  /**
   * The C heap: what the C allocator's arenas (every thread's) hold from the system, less what
   * V8 reports it allocated there (`malloced`, counted above): Node's, libuv's and the
   * libraries' native allocations and the arenas' free space (glibc; 0 elsewhere).
   */
  cHeap: number;
  /** The process's resident set. */
  rss: number;
  /** RSS none of the above accounts for: thread stacks, blocks the C allocator maps one by one, page tables' share. */
  residual: number;
}

export class Engine {
  /** @internal The stage workers (the daemon and the benches read their stats). */
  readonly pipeline: Pipeline;
  readonly domain: MemoryDomain;
  readonly config: ModelConfig;
  /** The sample rate of every reply. */
  readonly outputRate: number;
  /** Conversations admitted at once by compute, and the calibration that found it. */
  readonly capacity: ComputeCapacity;
  readonly #live = new Set<Conversation>();
  /** Opens under way: admitted by compute, not yet live. */
  #opening = 0;
  #pumping = false;
  #closed: Promise<void> | null = null;

  /** @internal Use `load()`. */
  constructor(pipeline: Pipeline, capacity: ComputeCapacity) {
    this.pipeline = pipeline;
    this.capacity = capacity;
    this.domain = pipeline.domain;
    this.config = pipeline.config;
    this.outputRate = pipeline.setup.options.outputRate;
  }

  /** Loads `model` (a checkpoint folder or a built-in name such as 'tiny') and starts the stages. */
  static load(model = 'tiny', options: EngineOptions = {}): Promise<Engine> {
    return startEngine(model, options, {});
  }

  /** Conversations open now. */
  get conversations(): number {
    return this.#live.size;
  }

  /**
   * Whether another conversation would be admitted now: the bytes one at `inputRate` (with
   * `vad`: its VAD engine too) would take against what the cap has free, and the conversations
   * open against the compute capacity (`compute`) and `maxConversations` (`tables`).
   */
  async admission(
    inputRate = 16000,
    vad = false,
    echoDelayMs = -1,
  ): Promise<{ planned: number; free: number; bytes: boolean; compute: boolean; tables: boolean; admit: boolean }> {
    const planned = await this.pipeline.plannedBytes(inputRate, undefined, vad, echoDelayMs);
    const s = this.domain.snapshot();
    const free = Math.max(0, s.limit - s.held.total - s.reserved);
    const bytes = planned <= free;
    const compute = this.#live.size + this.#opening < this.capacity.conversations;
    const tables = this.#live.size + this.#opening < this.pipeline.maxConversations;
    return { planned, free, bytes, compute, tables, admit: bytes && compute && tables };
  }

  /**
   * The share of a frame's period left when every open conversation replies at once, predicted
   * from the calibration (null when the capacity was given): below zero, they would underrun.
   */
  get realTimeMargin(): number | null {
    const c = this.capacity;
    return c.measured ? 1 - frameCostMs(c, this.#live.size) / c.periodMs : null;
  }

  /**
   * Opens a conversation. A conversation the cap cannot take is refused (MemoryLimitError), one
   * beyond the compute capacity or a fixed table (the ledger's owners, the pipeline's
   * conversations) with CapacityError, before anything is carved.
   */
  async open(options: ConversationOptions = {}): Promise<Conversation> {
    if (this.#closed !== null) throw new ClosedError('the engine is closed');
    const inputRate = optionValue<number>('inputRate', options.inputRate ?? 16000);
    const format = options.format ?? 'f32';
    if (format !== 'f32' && format !== 's16') throw new ArgumentError(`format must be 'f32' or 's16', got '${String(format)}'`);
    const seed = optionValue<number>('seed', options.seed);
    if (options.signal?.aborted === true) throw aborted(options.signal, 'opening the conversation');
    if (options.vad !== undefined && typeof options.vad !== 'boolean') throw new ArgumentError('vad must be true or false');
    const vad = options.vad === true;
    const echo = options.echoDelayMs;
    if (echo !== undefined && !vad) throw new ArgumentError('echoDelayMs needs vad: true (echo cancellation serves conversations that find their own turns)');
    if (echo !== undefined && !apmAvailable()) throw new UnsupportedError('echo cancellation is off: the addon was built without WebRTC audio processing');
    const open = this.#live.size + this.#opening;
    const cap = this.capacity;
    if (open >= cap.conversations)
      throw new CapacityError(
        `${open} conversations are open: the engine keeps ${cap.conversations} in real time ` +
          `(${cap.measured ? 'measured when it loaded' : 'the capacity option'})`,
      );
    this.#opening++;
    let pc: PipelineConversation;
    try {
      pc = await this.pipeline.open(echo === undefined ? { seed, inputRate, vad } : { seed, inputRate, vad, echoDelayMs: echo });
    } finally {
      this.#opening--;
    }
    const conv = new Conversation(this, pc, format, this.pipeline.setup.options.segmentSeconds, vad ? this.pipeline.setup.options.silenceMs : 0);
    this.#live.add(conv);
    if (options.signal !== undefined) conv.abortOn(options.signal);
    conv.emitMemory();
    this.#wake();
    return conv;
  }

  /**
   * Runs several of this engine's conversations at once, each on its own lockstep device (the
   * loopback device; `LoopbackDevice.pair` makes two that hear each other): every period waits
   * until every stage has done all it can, then each device plays and captures in the order
   * given, so a run is repeatable byte for byte. Resolves after `seconds` of device time, or when
   * `signal` aborts, a conversation closes or `until` says so.
   */
  async runTogether(
    runs: readonly { conversation: Conversation; device: DuplexDevice & { start?: unknown } }[],
    o: { seconds: number; signal?: AbortSignal; until?: (links: readonly DeviceLink[]) => boolean; fadeMs?: number },
  ): Promise<DeviceLink[]> {
    if (runs.length === 0) throw new ArgumentError('runTogether: no conversations');
    if (!(o.seconds > 0)) throw new ArgumentError(`runTogether: seconds must be positive, got ${o.seconds}`);
    const first = runs[0]!.device;
    for (const r of runs) {
      if (!this.#live.has(r.conversation)) throw new ArgumentError(`conversation ${r.conversation.index} is not open on this engine`);
      if (r.device.start !== undefined) throw new ArgumentError('runTogether runs lockstep devices (the loopback device), not a device on its own clock');
      if (r.device.period !== first.period || r.device.clock !== first.clock)
        throw new ArgumentError('runTogether: the devices share one period and one clock');
    }
    if (new Set(runs.map((r) => r.conversation)).size !== runs.length) throw new ArgumentError('runTogether: a conversation appears twice');
    const members: { host: DeviceHost; device: DuplexDevice; link: DeviceLink }[] = [];
    try {
      for (const r of runs) members.push({ ...r.conversation[kAttach](r.device, o.fadeMs), device: r.device });
      const links = members.map((m) => m.link);
      const end = first.clock + Math.round(o.seconds * first.rate);
      const done = (): boolean =>
        first.clock >= end || o.signal?.aborted === true || runs.some((r) => !this.#live.has(r.conversation)) || (o.until?.(links) ?? false);
      await driveTogether(members, done);
      return links;
    } finally {
      for (let k = 0; k < members.length; k++) runs[k]!.conversation[kDetach]();
    }
  }

  /** The memory manifest: every owner's bytes by category, the cap and the process total. */
  memory(): MemoryManifest {
    return this.domain.manifest();
  }

  /** Resident memory by thread runtime and ledger (see RuntimeMemory); asks every stage worker. */
  async runtime(): Promise<RuntimeMemory> {
    const stats = await this.pipeline.stats();
    const main = v8.getHeapStatistics();
    const threads = [
      { thread: 'main', heapCommitted: main.total_physical_size, malloced: main.malloced_memory },
      ...stats.map((s) => ({ thread: s.stage, heapCommitted: s.heapCommitted, malloced: s.malloced })),
    ];
    const runtime = threads.reduce((a, t) => a + t.heapCommitted + t.malloced, 0);
    const ledgerResident = this.domain.residentBytes() + stats.reduce((a, s) => a + s.slabResident, 0);
    const rss = process.memoryUsage.rss();
    const files = residentFileBytes();
    const malloced = threads.reduce((a, t) => a + t.malloced, 0);
    const cHeap = Math.max(0, native.mallocArenaBytes() - malloced);
    return { threads, runtime, ledgerResident, files, cHeap, rss, residual: rss - runtime - ledgerResident - files - cHeap };
  }

  snapshot(): MemorySnapshot {
    return this.domain.snapshot();
  }

  /** `await using engine = await load(…)`: closes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Ends every conversation, stops the workers and returns every byte to the cap. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      for (const c of [...this.#live]) await c.close();
      await this.pipeline.close();
    })();
    return this.#closed;
  }

  /** @internal A conversation ended. */
  async release(conv: Conversation, pc: PipelineConversation): Promise<void> {
    this.#live.delete(conv);
    await this.pipeline.closeConversation(pc);
  }

  /** @internal New input or demand: run the pump, or wake it. */
  wake(): void {
    this.#wake();
  }

  #wake(): void {
    if (this.#pumping) this.pipeline.bells.ring(BELL_MAIN);
    else if (this.#live.size > 0) void this.#pump();
  }

  /** Moves input into the rings and replies out of them until no conversation is open. */
  async #pump(): Promise<void> {
    this.#pumping = true;
    const p = this.pipeline;
    try {
      while (this.#live.size > 0) {
        if (p.failure !== null) {
          for (const c of [...this.#live]) c[kFail](p.failure);
          break;
        }
        const seen = p.bells.read(BELL_MAIN);
        let progress = false;
        for (const c of this.#live) if (c[kPump]()) progress = true;
        // Yield to the application either way; wait for a doorbell when nothing moved.
        if (progress) await new Promise<void>((resolve) => setImmediate(resolve));
        else await p.wait(seen, 100);
      }
    } finally {
      this.#pumping = false;
    }
  }
}

/** Loads a model into a new Engine: `const engine = await load('tiny', { memoryLimit: '1GiB' })`. */
export function load(model?: string, options?: EngineOptions): Promise<Engine> {
  return Engine.load(model, options);
}

/** Resident bytes of this process mapped from files (RssFile in /proc/self/status), 0 where there is none. */
function residentFileBytes(): number {
  try {
    const m = /^RssFile:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? 0 : Number(m[1]) * 1024;
  } catch {
    return 0;
  }
}
