/**
 * The worker side of a stage: exposes the control calls over comlink, pins the thread, builds
 * the stage on the shared memory domain and weights image, and runs its loop.
 *
 * The loop polls the stage and, when there is nothing to do, sleeps in `Atomics.wait` on the
 * stage's doorbell (no allocation, no event-loop turn). A control call is announced by the
 * coordinator through the stage's attention word: the loop then returns to the event loop so
 * comlink can deliver the message, and resumes after it.
 *
 * Worker threads only.
 */
import v8 from 'node:v8';
import { parentPort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { nodeEndpoint } from './endpoint.js';
import { MemoryDomain } from '../memory/domain.js';
import type { SlabRecord } from '../memory/slab.js';
import { AllocationError, ArgumentError, errorRecord, InternalError } from '../errors.js';
import { WeightsImage } from '../model/format/image.js';
import { computeThreadsShortfall } from '../model/blocks/kernels.js';
import { native } from '../native.js';
import type { StageApi, StageConversation, StageInit, StageName, StageOpen, StageReady, StageStats } from './protocol.js';
import { computeCpuMs, threadCpuMs } from '../core/clock.js';
import { Doorbells } from './ring.js';
import type { Stage } from './stages/stage.js';
import type { StageSpec } from './topology.js';
import { installConstructorTrap, type ConstructorTrap } from './trap.js';

function firstDamage(s: Stage<unknown>): string | null {
  for (const a of s.arenas) {
    const f = a.checkRedZones();
    if (f !== null) return `arena '${a.name}': red zone between '${f.before}' and '${f.after}' overwritten at offset ${f.offset}`;
  }
  return null;
}

/** Fault injection (test hook): an allocator whose `n`-th call fails. */
function failingAllocator(n: number): { allocate(bytes: number): SharedArrayBuffer } {
  let calls = 0;
  return {
    allocate(bytes: number): SharedArrayBuffer {
      if (++calls === n) throw new AllocationError(`injected failure of allocation ${n}`);
      return new SharedArrayBuffer(bytes);
    },
  };
}

/** The JS heap in use; after a full collection where the process exposes gc (soak and probes). */
function heapUsedNow(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === 'function') gc();
  return v8.getHeapStatistics().used_heap_size;
}

/** The spec `module` exports as `stage` (topology.ts), checked to be `name`'s. */
async function specOf(name: StageName, module: string): Promise<StageSpec> {
  const spec = ((await import(module)) as { stage?: StageSpec }).stage;
  if (spec?.name !== name || typeof spec.create !== 'function') throw new ArgumentError(`${module} does not export the spec of stage '${name}' as 'stage'`);
  return spec;
}

/** Serves stage `expected`, whose spec `module` exports (the generic worker entry's one call). */
export async function serveStage(expected: StageName, module: string): Promise<void> {
  const port = parentPort;
  if (port === null) throw new ArgumentError('a stage runs in a worker thread');
  const spec = await specOf(expected, module);
  let stage: Stage<unknown> | null = null;
  let domain: MemoryDomain | null = null;
  let init: StageInit | null = null;
  let control: Int32Array<ArrayBufferLike> = new Int32Array(1);
  let bells: Doorbells | null = null;
  let me = 0;
  // Control words of this stage (the layout comes with init).
  let attention = 0;
  let stopWord = 0;
  let idleWord = 0;
  let running = false;
  let stopped = false;
  let trap: ConstructorTrap | null = null;
  let heapAtReady = 0;
  let ready = false;

  /** Setup work after readiness: not counted by the trap, and the heap probe starts again after it. */
  function setup<T>(fn: () => T): T {
    if (!ready) return fn();
    try {
      return trap === null ? fn() : trap.paused(fn);
    } finally {
      heapAtReady = heapUsedNow();
    }
  }
  let cpuAtStart = 0;
  let computeAtStart = 0;
  let polls = 0; // polls that made progress
  let idlePolls = 0; // polls that found nothing (each followed by a sleep)
  const busy = new Float64Array(3); // [ms in polls that made progress, poll start, poll end]: no boxed doubles per poll
  const sleeping = new Float64Array(3); // [CPU ms in sleeps, before the sleep, after it]

  function attended(): void {
    Atomics.sub(control, attention, 1);
  }

  function loop(): void {
    const s = stage!;
    const b = bells!;
    const exitAfter = init!.exitAfterRecords;
    while (!stopped && Atomics.load(control, stopWord) === 0) {
      if (Atomics.load(control, attention) > 0) {
        setImmediate(loop);
        return;
      }
      const seen = b.read(me);
      native.clockInto(busy, 1);
      if (s.poll()) {
        polls++;
        native.clockInto(busy, 2);
        busy[0] = (busy[0] as number) + ((busy[2] as number) - (busy[1] as number));
        if (exitAfter > 0 && s.records >= exitAfter) process.exit(70);
        continue;
      }
      idlePolls++;
      // Quiescence (Pipeline.quiet): nothing to do at this bell value.
      const sleep = s.idle();
      Atomics.store(control, idleWord, seen + 1);
      native.threadCpuInto(sleeping, 1);
      b.wait(me, seen, sleep);
      native.threadCpuInto(sleeping, 2);
      sleeping[0] = (sleeping[0] as number) + ((sleeping[2] as number) - (sleeping[1] as number));
      Atomics.store(control, idleWord, 0);
    }
    running = false;
  }

  const api: StageApi = {
    init(i: StageInit): StageReady {
      if (i.stage !== expected) throw new ArgumentError(`this worker runs the ${expected} stage, not '${i.stage}'`);
      init = i;
      me = i.bell;
      attention = i.layout.attention + me;
      stopWord = i.layout.stop;
      idleWord = i.layout.idle + me;
      control = new Int32Array(i.control.buffer, i.control.byteOffset, i.layout.words);
      attended();
      bells = new Doorbells(control);
      let pinError: string | null = null;
      if (i.pin.length > 0) {
        const r = native.pinThread(i.pin);
        if (!r.ok) pinError = `${r.message ?? 'pinning failed'} (errno ${r.errno ?? '?'})`;
      }
      domain = MemoryDomain.attach(i.domain, i.failAllocationAt > 0 ? { allocator: failingAllocator(i.failAllocationAt) } : {});
      stage = spec.create({ domain, image: WeightsImage.attach(i.image), init: i, bells });
      return {
        stage: expected,
        affinity: native.allowedCpus(),
        cpu: native.currentCpu(),
        pinError,
        helpers: native.computeHelperCpus(),
        threadsError: computeThreadsShortfall(),
        slabs: stage.arenas.map((a) => a.slab.record()),
      };
    },
    size(o: StageConversation): number {
      attended();
      return setup(() => stage!.size(o));
    },
    open(o: StageOpen): SlabRecord[] {
      attended();
      return setup(() => {
        const before = stage!.arenas.length;
        stage!.open(o);
        // A conversation opened while the stage runs is ready as soon as it is built.
        if (ready) stage!.ready();
        return stage!.arenas.slice(before).map((a) => a.slab.record());
      });
    },
    calibrate(index: number, rows: readonly number[]): number[] {
      attended();
      if (ready) throw new InternalError(`${expected} stage: calibration runs before readiness`);
      return stage!.calibrate(index, rows);
    },
    close(index: number): void {
      attended();
      setup(() => stage!.close(index));
    },
    ready(): void {
      attended();
      stage!.ready();
      ready = true;
      heapAtReady = heapUsedNow();
      if (init!.trapAllocations) trap = installConstructorTrap();
    },
    start(): void {
      attended();
      if (running) return;
      running = true;
      cpuAtStart = threadCpuMs();
      computeAtStart = computeCpuMs();
      setImmediate(loop);
    },
    stats(): StageStats {
      attended();
      const cpu = threadCpuMs();
      const compute = computeCpuMs();
      const s = stage!;
      const heapDelta = heapUsedNow() - heapAtReady;
      const heap = v8.getHeapStatistics();
      return {
        stage: expected,
        clocks: s.clockReport(),
        records: s.records,
        ...s.batching(),
        slots: s.slotStats(),
        allocationsAfterReady: trap?.count ?? 0,
        heapDelta,
        heapCommitted: heap.total_physical_size,
        arrayBuffers: process.memoryUsage().arrayBuffers,
        malloced: heap.malloced_memory,
        // An inspection reading (a view per slab for mincore), not the stage's work: not trapped.
        slabResident: trap === null ? domain!.residentBytes() : trap.paused(() => domain!.residentBytes()),
        nonFinite: s.nonFinite,
        canary: firstDamage(s),
        busyMs: Math.round((busy[0] as number) * 1000) / 1000,
        polls,
        idlePolls,
        cpuMs: cpu < 0 ? -1 : Math.round((cpu - cpuAtStart) * 1000) / 1000,
        computeCpuMs: cpu < 0 ? -1 : Math.round((compute - computeAtStart) * 1000) / 1000,
        sleepCpuMs: cpu < 0 ? -1 : Math.round((sleeping[0] as number) * 1000) / 1000,
      };
    },
    stop(): void {
      attended();
      stopped = true;
      trap?.uninstall();
      // Return this worker's slabs to the cap (the ledger is shared, the slabs are ours).
      for (const a of stage?.arenas ?? []) domain!.releaseSlab(a.slab);
    },
  };
  // A thread boundary keeps only an Error's message and name: catalogue errors cross as records
  // the coordinator makes whole again (reviveError), so a cap refusal here is one on the main thread.
  const guarded = Object.fromEntries(
    Object.entries(api).map(([name, fn]) => [
      name,
      (...args: unknown[]): unknown => {
        try {
          return (fn as (...a: unknown[]) => unknown)(...args);
        } catch (error) {
          throw errorRecord(error);
        }
      },
    ]),
  ) as unknown as StageApi;
  Comlink.expose(guarded, nodeEndpoint(port));
}
