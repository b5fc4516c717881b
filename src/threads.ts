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
    if (kept.length !== tokens.length) {
      const env = { ...process.env };
      if (kept.length === 0) delete env.NODE_OPTIONS;
      else env.NODE_OPTIONS = kept.map((t) => (/[\s"]/.test(t) ? JSON.stringify(t) : t)).join(' ');
      out.env = env;
    }
  }
  return out;
}

/**
 * Makes a worker (or a pool of them) with `workerThreadOptions()`. An explicit `execArgv` may
 * not carry process-wide flags (V8's, heap sizes: they apply to every thread anyway); Node
 * names those it refuses, and they are left out.
 */
export function withWorkerOptions<T>(make: (o: { execArgv?: string[]; env?: NodeJS.ProcessEnv }) => T): T {
  const o = workerThreadOptions();
  try {
    return make(o);
  } catch (error) {
    const e = error as { code?: string; message?: string };
    if (o.execArgv === undefined || e.code !== 'ERR_WORKER_INVALID_EXEC_ARGV') throw error;
    const refused = new Set((e.message ?? '').slice((e.message ?? '').lastIndexOf(': ') + 2).split(', '));
    return make({ ...o, execArgv: o.execArgv.filter((a) => !refused.has(a)) });
  }
}
