/**
 * The daemon's Prometheus metrics: the counters it adds to as it serves, and gauges read at each
 * scrape from the engine (memory by owner and category, the cap, resident memory explained,
 * rings, stage clocks) and from the daemon (conversations, the device's xruns).
 *
 * Thread contract: the main thread.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Engine, RuntimeMemory } from '../api/engine.js';
import { CLOCKS } from '../core/clock.js';

/** What the gauges read from the daemon at a scrape. */
export interface MetricsSource {
  engine: Engine;
  conversations(): number;
  /** The device conversation's xruns, or null without one. */
  xruns(): { underruns: number; overruns: number; dropped: number } | null;
}

/** Registers every metric on `registry`; returns the counters the daemon adds to. */
export function daemonMetrics(
  registry: Registry,
  d: MetricsSource,
): { refused: Counter; turns: Counter; bargeIns: Counter; firstAudio: Histogram; eventLoop: LoopDelay } {
  const r = [registry];
  // The main thread's event loop: how late a 20 ms timer runs (sockets, the pump and control
  // calls share this thread). Node's monitorEventLoopDelay missed blocks here, so it is timed directly.
  const eventLoop = new LoopDelay();
  new Gauge({
    name: 'voxslab_event_loop_delay_seconds',
    help: "How late the main thread's timers ran since the previous scrape: p50, p99 and max",
    labelNames: ['quantile'],
    registers: r,
    collect() {
      const q = eventLoop.take();
      this.set({ quantile: '0.5' }, q.p50 / 1000);
      this.set({ quantile: '0.99' }, q.p99 / 1000);
      this.set({ quantile: '1' }, q.max / 1000);
    },
  });
  const refused = new Counter({
    name: 'voxslab_admissions_refused_total',
    help: 'Conversations refused by admission (cap or conversation limit)',
    registers: r,
  });
  const turns = new Counter({ name: 'voxslab_turns_total', help: 'Turns replied to', registers: r });
  const bargeIns = new Counter({ name: 'voxslab_barge_ins_total', help: 'Replies the user interrupted (VAD conversations)', registers: r });
  const firstAudio = new Histogram({
    name: 'voxslab_first_audio_seconds',
    help: 'From the end of user speech to the first reply sample',
    buckets: [0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2],
    registers: r,
  });
  new Gauge({
    name: 'voxslab_capacity_conversations',
    help: 'Conversations the engine admits at once by compute (measured when it loaded, or the capacity option)',
    registers: r,
    collect() {
      this.set(d.engine.capacity.conversations);
    },
  });
  // Only a measured capacity predicts the margin.
  if (d.engine.capacity.measured)
    new Gauge({
      name: 'voxslab_realtime_margin',
      help: "The share of a frame's period left if every open conversation replied at once, predicted from the load-time calibration",
      registers: r,
      collect() {
        this.set(d.engine.realTimeMargin ?? 0);
      },
    });
  new Gauge({
    name: 'voxslab_device_xruns',
    help: 'The device conversation: periods owed a reply with no audio (underrun), microphone periods lost (overrun), input samples the device ring dropped',
    labelNames: ['kind'],
    registers: r,
    collect() {
      this.reset();
      const x = d.xruns();
      if (x === null) return;
      this.set({ kind: 'underrun' }, x.underruns);
      this.set({ kind: 'overrun' }, x.overruns);
      this.set({ kind: 'input_samples_dropped' }, x.dropped);
    },
  });
  new Gauge({
    name: 'voxslab_memory_bytes',
    help: 'Bytes charged, by owner and category',
    labelNames: ['owner', 'category'],
    registers: r,
    collect() {
      this.reset();
      for (const o of d.engine.snapshot().owners) for (const [cat, u] of Object.entries(o.categories)) this.set({ owner: o.name, category: cat }, u.footprint);
    },
  });
  new Gauge({
    name: 'voxslab_memory_held_bytes',
    help: 'Bytes the process holds under the cap',
    registers: r,
    collect() {
      this.set(d.engine.snapshot().held.total);
    },
  });
  // RSS explained: the ledger's resident slabs, each thread's runtime, and what neither accounts for.
  let runtime: Promise<RuntimeMemory> | null = null;
  const reading = (): Promise<RuntimeMemory> => {
    // One reading per scrape serves every gauge below.
    runtime ??= d.engine.runtime().finally(() => setImmediate(() => (runtime = null)));
    return runtime;
  };
  new Gauge({
    name: 'voxslab_runtime_bytes',
    help: "Each thread's JavaScript runtime: V8's committed heap and what V8 allocated outside it (no owner's; not under the cap)",
    labelNames: ['thread', 'kind'],
    registers: r,
    async collect() {
      this.reset();
      for (const t of (await reading()).threads) {
        this.set({ thread: t.thread, kind: 'heap' }, t.heapCommitted);
        this.set({ thread: t.thread, kind: 'malloced' }, t.malloced);
      }
    },
  });
  new Gauge({
    name: 'voxslab_resident_bytes',
    help: "The process's resident set, by what accounts for it: the ledger's slabs, the threads' runtimes, pages mapped from files (code), the C heap's arenas, and the residual",
    labelNames: ['part'],
    registers: r,
    async collect() {
      const m = await reading();
      this.set({ part: 'total' }, m.rss);
      this.set({ part: 'ledger' }, m.ledgerResident);
      this.set({ part: 'runtime' }, m.runtime);
      this.set({ part: 'files' }, m.files);
      this.set({ part: 'c_heap' }, m.cHeap);
      this.set({ part: 'residual' }, m.residual);
    },
  });
  new Gauge({
    name: 'voxslab_memory_limit_bytes',
    help: 'The cap',
    registers: r,
    collect() {
      this.set(d.engine.snapshot().limit);
    },
  });
  new Gauge({
    name: 'voxslab_allocations_after_readiness',
    help: 'Allocation attempts refused because their owner was ready',
    registers: r,
    collect() {
      this.set(d.engine.snapshot().allocations.afterReadiness.attempts);
    },
  });
  new Gauge({
    name: 'voxslab_conversations',
    help: 'Conversations open',
    registers: r,
    collect() {
      this.set(d.conversations());
    },
  });
  new Gauge({
    name: 'voxslab_ring_high_water_ratio',
    help: 'Most of each ring of each open conversation ever in use, as a fraction of its capacity',
    labelNames: ['conversation', 'ring'],
    registers: r,
    collect() {
      this.reset();
      for (const c of d.engine.pipeline.conversations.values()) {
        for (const [name, ring] of Object.entries(c.rings)) this.set({ conversation: String(c.index), ring: name }, ring.maxUsed / ring.capacity);
      }
    },
  });
  new Gauge({
    name: 'voxslab_stage_busy_seconds',
    help: 'Wall seconds each stage worker spent in polls that made progress',
    labelNames: ['stage'],
    registers: r,
    async collect() {
      for (const s of await d.engine.pipeline.stats()) this.set({ stage: s.stage }, s.busyMs / 1000);
    },
  });
  new Gauge({
    name: 'voxslab_stage_clock_seconds',
    help: 'Wall seconds per model stage clock, summed over the open conversations',
    labelNames: ['clock'],
    registers: r,
    async collect() {
      const sum = new Map<string, number>(CLOCKS.map((n) => [n, 0]));
      for (const s of await d.engine.pipeline.stats())
        for (const c of s.clocks) for (const [n, v] of Object.entries(c)) sum.set(n, (sum.get(n) ?? 0) + v.ms / 1000);
      for (const [n, v] of sum) this.set({ clock: n }, v);
    },
  });
  return { refused, turns, bargeIns, firstAudio, eventLoop };
}

/** How late a timer on this thread runs, every 20 ms: the last samples (up to ten minutes' worth) until `take`. */
export class LoopDelay {
  readonly #ms = new Float64Array(30_000);
  #n = 0;
  #expected = performance.now() + 20;
  readonly #timer = setInterval(() => {
    const now = performance.now();
    this.#ms[this.#n++ % this.#ms.length] = Math.max(0, now - this.#expected);
    this.#expected = now + 20;
  }, 20).unref();

  /** p50, p99 and max of the samples since the last call, ms; then starts again. */
  take(): { p50: number; p99: number; max: number } {
    const s = this.#ms.slice(0, Math.min(this.#n, this.#ms.length)).sort();
    this.#n = 0;
    if (s.length === 0) return { p50: 0, p99: 0, max: 0 };
    const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
    return { p50: at(0.5), p99: at(0.99), max: s[s.length - 1]! };
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
