/**
 * The benchmarks `voxslab bench` can run. Shipped code does not import the benchmarks: the
 * `voxslab/bench` entry (bench/index.ts) registers them here when it is installed.
 */
export interface BenchOptions {
  quick: boolean;
  production: boolean;
  /** bench model: llama.cpp in the same run, alone in a process of its own. */
  peer: boolean;
  /** bench model --peer: llama.cpp's llama-bench binary (node-llama-cpp without it). */
  peerBench?: string;
  models: string[];
  /** bench duplex: the voice detector its sessions and pipeline run (default: option `vad`'s). */
  vad?: string;
  /** bench duplex --production: the speculation pause its engines run (default: option `speculateMs`'s). */
  speculateMs?: number;
}

export interface Bench {
  /** One line for `voxslab bench --help`. */
  summary: string;
  run(options: BenchOptions): Promise<unknown>;
  format(result: never): string;
}

const registry = new Map<string, Bench>();

/** Registers a benchmark module (its `run` and `format`) under `name`. */
export function registerBench(name: string, summary: string, module: Omit<Bench, 'summary'>): void {
  registry.set(name, { summary, run: module.run, format: module.format });
}

export function registeredBenches(): ReadonlyMap<string, Bench> {
  return registry;
}
