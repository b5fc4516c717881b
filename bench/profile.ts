/**
 * `npm run profile -- <voxslab arguments>`: runs one voxslab command under V8's CPU profiler
 * with every thread profiled (`--cpu-prof` reaches worker threads, which clinic does not
 * follow), then prints each thread's busiest functions by self time. The `.cpuprofile` files
 * stay in the profile folder (VOXSLAB_PROFILE_DIR, default `./profile-<time>`) for Chrome
 * DevTools' Performance panel or speedscope. With `--clinic`, the same command also runs under
 * `clinic doctor` (installed separately: `npm install -g clinic`), whose HTML report in the same
 * folder shows the main thread's event loop delay, GC and handles.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** What V8 names the time it could not attribute to JavaScript. */
const IDLE = new Set(['(idle)', '(program)', '(garbage collector)', '(root)']);

export interface ThreadSummary {
  file: string;
  /** `main`, or `thread <id>` with the worker's stage where the profile shows it. */
  thread: string;
  wallMs: number;
  busyMs: number;
  gcMs: number;
  top: { fn: string; ms: number }[];
}

/** Self time per function of one profile, from its samples and their time deltas. */
export function summarize(file: string, p: CpuProfile, topN = 8): ThreadSummary {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  const samples = p.samples ?? [];
  const deltas = p.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    // A sample's time is the gap to the next one.
    const us = deltas[i + 1] ?? 0;
    self.set(samples[i] as number, (self.get(samples[i] as number) ?? 0) + us);
  }
  const perFn = new Map<string, number>();
  let busy = 0;
  let gc = 0;
  for (const [id, us] of self) {
    const n = byId.get(id);
    if (n === undefined) continue;
    const name = n.callFrame.functionName || '(anonymous)';
    if (name === '(garbage collector)') gc += us;
    if (IDLE.has(name)) continue;
    busy += us;
    const where = n.callFrame.url === '' ? '' : ` ${n.callFrame.url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${n.callFrame.lineNumber + 1}`;
    const key = `${name}${where}`;
    perFn.set(key, (perFn.get(key) ?? 0) + us);
  }
  // The file name carries the thread id (0: the main thread); a worker is named by its entry
  // script or its stage where a sample caught one.
  const tid = /^CPU\.\d+\.\d+\.\d+\.(\d+)\./.exec(file)?.[1];
  let stage: string | undefined;
  for (const n of p.nodes) {
    const fn = n.callFrame.url.endsWith('stages.js') ? n.callFrame.functionName : '';
    stage ??= (/\/workers\/([a-z]+)\.js$/.exec(n.callFrame.url) ?? /^(Capture|Frontend|Conformer|Depthformer|Playback)Stage$/.exec(fn))?.[1]?.toLowerCase();
  }
  const thread = tid === '0' ? 'main' : `thread ${tid ?? '?'}${stage === undefined ? '' : ` (${stage})`}`;
  const top = [...perFn]
    .sort((a, b) => b[1] - a[1])
    .slice(0, topN)
    .map(([fn, us]) => ({ fn, ms: Math.round(us / 100) / 10 }));
  return { file, thread, wallMs: Math.round((p.endTime - p.startTime) / 1000), busyMs: Math.round(busy / 1000), gcMs: Math.round(gc / 1000), top };
}

function main(argv: string[]): number {
  const clinic = argv.includes('--clinic');
  const args = argv.filter((a) => a !== '--clinic');
  if (args.length === 0) {
    process.stderr.write('usage: npm run profile -- [--clinic] <voxslab command and options>   (e.g. run --model tiny --in A.wav --out B.wav)\n');
    return 2;
  }
  const dir = resolve(process.env.VOXSLAB_PROFILE_DIR ?? `profile-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  const r = spawnSync(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, CLI, ...args], { stdio: 'inherit' });
  if (r.status !== 0) process.stderr.write(`profile: voxslab ${args.join(' ')} exited with ${r.status ?? r.signal}\n`);
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  for (const f of files.sort()) {
    const s = summarize(f, JSON.parse(readFileSync(join(dir, f), 'utf8')) as CpuProfile);
    process.stderr.write(`\n${s.thread} (${f}): ${s.busyMs} ms busy in JavaScript and native calls of ${s.wallMs} ms, ${s.gcMs} ms GC\n`);
    for (const t of s.top) process.stderr.write(`  ${String(t.ms).padStart(9)} ms  ${t.fn}\n`);
  }
  process.stderr.write(`\nprofile: ${files.length} thread profiles in ${dir} (open them in Chrome DevTools → Performance, or speedscope)\n`);
  if (clinic) {
    // NO_INSIGHT: without it clinic asks about usage statistics first and, with no terminal, quits.
    const c = spawnSync('clinic', ['doctor', '--open=false', '--dest', dir, '--', process.execPath, CLI, ...args], {
      stdio: 'inherit',
      env: { ...process.env, NO_INSIGHT: '1' },
    });
    if (c.error !== undefined) process.stderr.write('profile: clinic is not installed (npm install -g clinic)\n');
  }
  return r.status ?? 1;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])) process.exitCode = main(process.argv.slice(2));
