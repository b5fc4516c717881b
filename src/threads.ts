/**
 * Node options for voxslab's own worker threads (pipeline stages, quantization pool).
 *
 * A worker inherits its parent's `execArgv` and reads `NODE_OPTIONS` again, so module hooks the
 * host loads (`--import`, `--require`, `--loader`: coverage, mocks, tracing) would be set up once
 * more on every thread and sit in front of every module the thread imports. The workers run only
 * voxslab's own compiled code, so they start without those hooks; every other option is kept.
 */

const HOOKS = new Set(['--import', '--require', '-r', '--loader', '--experimental-loader']);

/** `args` without module-hook flags, in either the `--flag=value` or the `--flag value` form. */
export function withoutModuleHooks(args: readonly string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const eq = a.indexOf('=');
    if (HOOKS.has(eq < 0 ? a : a.slice(0, eq))) {
      if (eq < 0) i++;
      continue;
    }
    kept.push(a);
  }
  return kept;
}

/** Splits `NODE_OPTIONS` as Node does: whitespace separates, double quotes group. */
function splitNodeOptions(s: string): string[] {
  return (s.match(/"(?:[^"\\]|\\.)*"|\S+/g) ?? []).map((t) => (t.startsWith('"') ? t.slice(1, -1).replace(/\\(.)/g, '$1') : t));
}

/** A copy of `env` whose NODE_OPTIONS holds `tokens` (joined as splitNodeOptions splits; none: unset). */
function withNodeOptions(env: NodeJS.ProcessEnv, tokens: readonly string[]): NodeJS.ProcessEnv {
  const out = { ...env };
  if (tokens.length === 0) delete out.NODE_OPTIONS;
  else out.NODE_OPTIONS = tokens.map((t) => (/[\s"]/.test(t) ? JSON.stringify(t) : t)).join(' ');
  return out;
}

/**
 * `execArgv` and `env` for a voxslab worker thread: empty when the host loads no module hook
 * (the worker then inherits as usual).
 */
export function workerThreadOptions(): { execArgv?: string[]; env?: NodeJS.ProcessEnv } {
  const out: { execArgv?: string[]; env?: NodeJS.ProcessEnv } = {};
  const execArgv = withoutModuleHooks(process.execArgv);
  if (execArgv.length !== process.execArgv.length) out.execArgv = execArgv;
  const options = process.env.NODE_OPTIONS;
  if (options !== undefined) {
    const tokens = splitNodeOptions(options);
    const kept = withoutModuleHooks(tokens);
    if (kept.length !== tokens.length) out.env = withNodeOptions(process.env, kept);
  }
  return out;
}

/**
 * The options without what Node refused in `message` (ERR_WORKER_INVALID_EXEC_ARGV), or null
 * when there is nothing to drop.
 */
function withoutRefused(o: { execArgv?: string[]; env?: NodeJS.ProcessEnv }, message: string): typeof o | null {
  const name = (t: string): string => t.slice(0, t.includes('=') ? t.indexOf('=') : t.length);
  if (message.includes('NODE_OPTIONS') && o.env?.NODE_OPTIONS !== undefined) {
    // "… NODE_OPTIONS env variable: --a is not allowed in NODE_OPTIONS"
    const refused = new Set([...message.matchAll(/(-[-\w]+) is not allowed in NODE_OPTIONS/g)].map((m) => m[1]!));
    const tokens = splitNodeOptions(o.env.NODE_OPTIONS);
    const kept = tokens.filter((t) => !refused.has(name(t)));
    return kept.length === tokens.length ? null : { ...o, env: withNodeOptions(o.env, kept) };
  }
  if (o.execArgv === undefined) return null;
  // "… invalid execArgv flags: --a, --b"
  const refused = new Set(message.slice(message.lastIndexOf(': ') + 2).split(', '));
  const execArgv = o.execArgv.filter((a) => !refused.has(a));
  return execArgv.length === o.execArgv.length ? null : { ...o, execArgv };
}

/**
 * Makes a worker (or a pool of them) with `workerThreadOptions()`. A worker's own `execArgv`
 * and `NODE_OPTIONS` may not carry process-wide flags (V8's, heap sizes, trace events: they
 * apply to every thread anyway); Node names those it refuses, and they are left out.
 */
export function withWorkerOptions<T>(make: (o: { execArgv?: string[]; env?: NodeJS.ProcessEnv }) => T): T {
  let o = workerThreadOptions();
  for (;;) {
    try {
      return make(o);
    } catch (error) {
      const e = error as { code?: string; message?: string };
      const next = e.code === 'ERR_WORKER_INVALID_EXEC_ARGV' ? withoutRefused(o, e.message ?? '') : null;
      if (next === null) throw error;
      o = next;
    }
  }
}

/**
 * V8 limits of a pipeline stage's worker. A stage runs a little of its own code in a loop, so a
 * small code range serves it, where V8's default reserves 512 MiB of address space per isolate
 * (2.5 GiB for five stages, which a process under an address-space limit does not have). The
 * heap bound makes a runaway worker fail as ERR_WORKER_OUT_OF_MEMORY, a WorkerError, instead of
 * aborting the whole process.
 */
export const STAGE_RESOURCE_LIMITS = Object.freeze({ codeRangeSizeMb: 32, maxOldGenerationSizeMb: 1024 });
