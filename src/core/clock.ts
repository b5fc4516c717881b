/**
 * Stage clocks: wall milliseconds and call counts per stage of a conversation, kept in its
 * arena, and the stopwatch that adds to them.
 */
import type { Arena } from '../memory/arena.js';
import { native } from '../native.js';

/** The clocks a conversation accumulates: wall time and calls of each part of the work (slot = index). */
export const CLOCKS = ['frontend', 'encoder', 'prefill', 'textStep', 'audioStep', 'depthformer', 'detokenizer'] as const;
export type ClockName = (typeof CLOCKS)[number];
export const CLOCK_FRONTEND = 0;
export const CLOCK_ENCODER = 1;
export const CLOCK_PREFILL = 2;
export const CLOCK_TEXT = 3;
export const CLOCK_AUDIO = 4;
export const CLOCK_DEPTHFORMER = 5;
export const CLOCK_DETOKENIZER = 6;

export interface StageClocks {
  ms: Float64Array; // [CLOCKS]
  count: Float64Array; // [CLOCKS]
}

/** Carves one set of clocks in `arena` (charged as metadata). */
export function carveClocks(arena: Arena, prefix: string): StageClocks {
  return {
    ms: arena.carve(`${prefix}clock.ms`, 'metadata', Float64Array, CLOCKS.length),
    count: arena.carve(`${prefix}clock.count`, 'metadata', Float64Array, CLOCKS.length),
  };
}

/**
 * [CPU ms this thread spent inside stopwatch sections, the open section's start, the latest
 * reading]: module state, so one set per thread. Sections never nest.
 */
const sectionCpu = new Float64Array(3);

/**
 * The CPU milliseconds this thread has spent inside stopwatch sections (the model's compute).
 * A stage worker's CPU outside them is the pipeline's own: rings, wake-ups, copies, control.
 */
export function computeCpuMs(): number {
  return sectionCpu[0] as number;
}

/** This thread's CPU milliseconds so far (-1 where the OS has no per-thread clock). */
export function threadCpuMs(): number {
  native.threadCpuInto(sectionCpu, 2);
  return sectionCpu[2] as number;
}

/**
 * Times one stage at a time on the native monotonic clock, and the thread's CPU time inside it.
 * Start and end live in a Float64Array: performance.now() would leave a boxed double per call.
 * One thread; allocates nothing after construction.
 */
export class Stopwatch {
  readonly #t = new Float64Array(2); // [start, now] ms

  tic(): void {
    // A timed section is compute: split calls elsewhere leave this thread a CPU meanwhile.
    native.computeScope(true);
    native.threadCpuInto(sectionCpu, 1);
    native.clockInto(this.#t, 0);
  }

  /** Adds the time since `tic()` to `clocks` at `slot`, and one call. */
  toc(clocks: StageClocks, slot: number): void {
    this.stop();
    this.share(clocks, slot, 1);
  }

  /** Ends the section `tic()` began (its CPU counted once); `share` then books it. */
  stop(): void {
    native.clockInto(this.#t, 1);
    native.threadCpuInto(sectionCpu, 2);
    sectionCpu[0] = (sectionCpu[0] as number) + ((sectionCpu[2] as number) - (sectionCpu[1] as number));
    native.computeScope(false);
  }

  /** Adds 1/`of` of the stopped section to `clocks` at `slot`, and one call: a section `of` conversations shared. */
  share(clocks: StageClocks, slot: number, of: number): void {
    clocks.ms[slot] = (clocks.ms[slot] as number) + ((this.#t[1] as number) - (this.#t[0] as number)) / of;
    clocks.count[slot] = (clocks.count[slot] as number) + 1;
  }
}
