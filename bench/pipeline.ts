/**
 * `voxslab bench pipeline`: the five-stage pipeline as `voxslab run` runs it, beside the
 * single-thread engine in the same run.
 *
 * - Per checkpoint (tiny, small; `--production` adds the 1.5B shape at q4 and q8): one conversation on
 *   one thread (the peer) and through the pipeline, then two at once through the pipeline (the
 *   same input, so both replies are at text or at audio together; and inputs of different
 *   lengths, whose replies are not): wall time per generated frame, the ratio of two
 *   conversations to one, real-time factor, first audio after the end of speech (fed
 *   at device pace with --realtime), gaps between reply frames at the main thread (p50, p99),
 *   per-stage ms per call, ring occupancy, each worker's busy time, and the process RSS next
 *   to the accounted bytes.
 * - Capacity: the most simultaneous conversations whose replies never starve a player that
 *   starts at each reply's first sample (underrun 0 ms), searched by doubling then bisection
 *   up to the engine's 64, with the p99 gap between reply frames beside each run; accounted
 *   bytes and RSS per added conversation.
 * - Wake latency: a record answered across two threads through rings and doorbells
 *   (Atomics.wait), p50/p99 of one way, beside postMessage in the same run.
 * - Each row's steady frame (a long reply's wall time less a short one's, per added frame) on
 *   the default placement, beside the engine's own frame (bench model's frameMs) with the same
 *   compute threads.
 * - Placement: for 1, 2, 4 and 8 CPUs (as many as the process may use), `voxslab run` under
 *   `taskset` on the 1.5B q4 shape (with --production; else the last checkpoint): the steady frame with the default placement and with one
 *   thread per stage, beside the engine's own frame on those CPUs (each in a child process).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { runCommand } from '../src/cli/run.js';
import { load } from '../src/api/engine.js';
import { encodeWav, WavReader } from '../src/dsp/wav.js';
import { openFileSource } from '../src/io/files.js';
import { engineFrameMs, production } from './model.js';
import { optionValue } from '../src/options.js';
import { native } from '../src/native.js';
import { resolveModel } from '../src/io/checkpoint.js';
import { Doorbells, RecordRing, ringBytes } from '../src/runtime/ring.js';
import { round, type Spread, spread } from './util.js';

const FIXTURE = fileURLToPath(new URL('../../test/fixtures/hello.wav', import.meta.url));
const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const ENGINE_FRAME = fileURLToPath(new URL('./workers/engine-frame.js', import.meta.url));
/** The capacity search's reply length, s (each conversation's longest). */
const REPLY_SECONDS = 4;
/** The capacity search stops here: twice the 64 conversations the tiny model must hold. */
const CAPACITY_LIMIT = 128;

interface RunConv {
  wallMs: number;
  audioFrames: number;
  realTimeFactor: number | null;
  firstAudioMs: number | null;
  frameIntervalMs: { p50: number; p99: number; max: number } | null;
  underrunMs: number;
  timings: Record<string, { ms: number; count: number }>;
  /** The single engine's thread CPU over the turn, and the part in timed compute sections. */
  cpu?: { ms: number; computeMs: number } | null;
}
interface RunReport {
  conversations: RunConv[];
  pipeline?: {
    mainCpuMs: number;
    mainSleepCpuMs: number;
    stages: {
      stage: string;
      busyMs: number;
      cpuMs: number;
      computeCpuMs: number;
      sleepCpuMs: number;
      batchedSteps: number;
      batchedTextHeads: number;
      batchedFrames: number;
      clocks: Record<string, { ms: number; count: number }>[];
    }[];
    rings: Record<string, { capacity: number; maxUsed: number }>[];
  };
  manifest: { totals: { slab: number; resident: number } };
}

async function runOnce(
  model: string,
  n: number,
  o: { engine?: string; realtime?: boolean; slots?: number; reply?: string; inputs?: string[] },
): Promise<{ report: RunReport; rssMiB: number; wallMs: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-bench-'));
  try {
    const rep = join(dir, 'r.json');
    const t0 = performance.now();
    await runCommand(
      {
        model,
        inputs: o.inputs ?? Array.from({ length: n }, () => FIXTURE),
        outputs: Array.from({ length: n }, (_, i) => join(dir, `${i}.wav`)),
        reply: o.reply ?? '4',
        report: rep,
        ...(o.engine !== undefined ? { engine: o.engine } : {}),
        ...(o.realtime === true ? { realtime: true } : {}),
        ...(o.slots !== undefined ? { slots: String(o.slots) } : {}),
      },
      () => undefined,
    );
    const wallMs = performance.now() - t0;
    return { report: JSON.parse(readFileSync(rep, 'utf8')) as RunReport, rssMiB: process.memoryUsage().rss / 2 ** 20, wallMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Wall ms per frame a long reply adds over a short one (one conversation each): the frame without start-up and prefill. */
function steadyFrameMs(short: RunReport, long: RunReport): number {
  const [a, b] = [short.conversations[0]!, long.conversations[0]!];
  if (b.audioFrames <= a.audioFrames) return a.wallMs / a.audioFrames;
  return (b.wallMs - a.wallMs) / (b.audioFrames - a.audioFrames);
}

/** Wall ms per generated frame of a run (all its conversations' frames; conversations overlap). */
function msPerFrame(r: RunReport): number {
  const frames = r.conversations.reduce((a, c) => a + c.audioFrames, 0);
  return Math.max(...r.conversations.map((c) => c.wallMs)) / frames;
}

/**
 * The Depthformer stage's reply work (text steps, audio steps, Depthformer frames; not the
 * prefill) per frame period: summed over the run's conversations, over the most frames any
 * of them generated. Two conversations over one: what a frame costs the stage that limits it.
 */
function replyMsPerFrame(r: RunReport): number {
  const depth = r.pipeline!.stages.find((s) => s.stage === 'depthformer')!;
  let ms = 0;
  for (const c of depth.clocks) for (const k of ['textStep', 'audioStep', 'depthformer']) ms += c[k]?.ms ?? 0;
  return ms / Math.max(...r.conversations.map((c) => c.audioFrames));
}

type Run = Awaited<ReturnType<typeof runOnce>>;

/** The long reply (s) whose difference from the usual 4 s gives per-frame costs without start-up. */
const LONG_REPLY = '16';

/** The run with fewer wall ms per generated frame. */
function faster(a: Run | null, b: Run): Run {
  return a === null || msPerFrame(b.report) < msPerFrame(a.report) ? b : a;
}

function perCall(t: Record<string, { ms: number; count: number }>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(t)
      .filter(([, v]) => v.count > 0)
      .map(([k, v]) => [k, round(v.ms / v.count, 3)]),
  );
}

export interface PipelineBenchRow {
  checkpoint: string;
  /** Compute threads of the heavy stages and of the engine beside them (the default: the allowed CPUs, at most 8). */
  threads: number;
  /** Steady wall ms per generated frame (a long reply less a short one, per added frame): the pipeline on its default placement, and the single-thread engine. */
  pipelineFrameMs: number;
  singleFrameMs: number;
  /** The engine's own frame with the same compute threads (bench model's frameMs), and the pipeline's over it. */
  engineFrameMs: number;
  pipelineOverEngineFrame: number;
  /** The pipeline's steady frame over the 80 ms it plays. */
  steadyRealTimeFactor: number;
  singleMsPerFrame: number;
  pipelineMsPerFrame: number;
  /** Pipeline over single thread, one conversation (below 1: the stages overlap). */
  pipelineOverSingle: number;
  twoMsPerFrame: number;
  /** Wall time of two conversations at once over one conversation's (2.0 = no overlap at all). */
  twoOverOne: number;
  /**
   * Two conversations whose inputs differ in length (the fixture, and its first 1.2 s): wall ms
   * per generated frame over one conversation's, and the share of their batched steps whose
   * heads were batched too (both at text or both at audio).
   */
  mixedOverOne: number;
  mixedHeadsBatched: number;
  /** The Depthformer stage's reply work per frame period (see replyMsPerFrame), two conversations ÷ one: same input, different lengths. */
  twoStepsOverOne: number;
  mixedStepsOverOne: number;
  realTimeFactor: number;
  realtimeFirstAudioMs: number | null;
  frameGapMs: { p50: number; p99: number } | null;
  stageMsPerCall: Record<string, number>;
  busyMs: Record<string, number>;
  /** Pipeline overhead by CPU accounting (see overheadOf), the higher of the rounds; null where threads have no CPU clock (or on the 1.5B shape). */
  overhead: Overhead | null;
  overheadRounds: number[];
  ringMaxUsed: Record<string, string>;
  rssMiB: number;
  accountedMiB: number;
  /** The capacity search's runs in the order tried (see capacitySearch). */
  capacity: CapacityTry[];
  /** The most conversations at once every one of which stayed real-time. */
  capacityRealTime: number;
  /** What one more conversation adds, over the runs tried: accounted bytes and process RSS (MiB). */
  perConversation: { accountedMiB: number; rssMiB: number };
  /** The engine's compute capacity as `load()` measures it (what a daemon admits), and the frame times it came from. */
  capacityCalibrated: number;
  calibration: { rows: number[]; frameMs: number[] };
}

interface Overhead {
  /** Generated frames of the short and the long runs whose difference the figures below are per (equal: the reply stopped early, the short runs alone). */
  frames: [number, number];
  /** CPU ms per frame outside the model's timed compute: every stage worker and the main thread, one conversation. */
  pipelineMsPerFrame: number;
  /** The same for the single-thread engine (its orchestration, sampling, WAV I/O). */
  singleMsPerFrame: number;
  /** The single-thread engine's wall ms per frame. */
  singleFrameMs: number;
  /** (pipeline − single) per frame, over the single engine's wall ms per frame: the pipeline's own cost. */
  overSingleFrame: number;
  /** The same over the short runs alone, start-up included (each worker warms its own code). */
  shortRunOverSingleFrame: number;
  /** All the pipeline's thread CPU per frame (compute included, helpers not) over the single engine's. */
  cpuOverSingle: number;
  /** Per worker (and `main`), CPU ms per frame outside timed compute, and of it the part spent going to sleep and waking. */
  perThread: Record<string, number>;
  sleepPerThread: Record<string, number>;
}

/** One run's CPU ms: outside the timed compute sections (per thread and in all), asleep (going to sleep and waking), in all. */
function cpuOf(r: RunReport): { outside: number; cpu: number; perThread: Record<string, number>; sleep: Record<string, number> } | null {
  const p = r.pipeline;
  if (p === undefined) {
    const c = r.conversations[0]!.cpu;
    return c == null ? null : { outside: c.ms - c.computeMs, cpu: c.ms, perThread: {}, sleep: {} };
  }
  if (p.mainCpuMs < 0 || p.stages.some((s) => s.cpuMs < 0)) return null;
  const perThread: Record<string, number> = { main: p.mainCpuMs };
  const sleep: Record<string, number> = { main: p.mainSleepCpuMs };
  let outside = p.mainCpuMs;
  let cpu = p.mainCpuMs;
  for (const s of p.stages) {
    perThread[s.stage] = s.cpuMs - s.computeCpuMs;
    sleep[s.stage] = s.sleepCpuMs;
    outside += s.cpuMs - s.computeCpuMs;
    cpu += s.cpuMs;
  }
  return { outside, cpu, perThread, sleep };
}

/**
 * The pipeline's own cost per frame by CPU clocks: what its threads spend outside the model's
 * timed compute sections (rings, wake-ups, copies, control), less what the single-thread
 * engine spends outside its own, over the single engine's frame time. Thread CPU leaves out
 * what wall clocks on a shared machine add (preemption, the other stages' turns). Per frame
 * means per additional frame: the difference between a long and a short reply, so that what
 * a run pays once (each worker compiling its code, the first pass over the weights) is not
 * spread over its frames; the short runs alone give that figure too.
 */
function overheadOf(single: RunReport, one: RunReport, longSingle: RunReport, longOne: RunReport): Overhead | null {
  const [s, p, ls, lp] = [single, one, longSingle, longOne].map(cpuOf);
  if (s == null || p == null || ls == null || lp == null) return null;
  const frames = (r: RunReport) => r.conversations[0]!.audioFrames;
  const shortRun = (p.outside / frames(one) - s.outside / frames(single)) / msPerFrame(single);
  const sf = frames(longSingle) - frames(single);
  const pf = frames(longOne) - frames(one);
  if (sf <= 0 || pf <= 0) {
    // The reply ended before the short run's limit (tiny): the short runs alone.
    const per = (a: Record<string, number>) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, round(v / frames(one), 4)]));
    return {
      frames: [frames(one), frames(one)],
      pipelineMsPerFrame: round(p.outside / frames(one), 4),
      singleMsPerFrame: round(s.outside / frames(single), 4),
      singleFrameMs: round(msPerFrame(single), 3),
      overSingleFrame: round(shortRun, 4),
      shortRunOverSingleFrame: round(shortRun, 4),
      cpuOverSingle: round(p.cpu / frames(one) / (s.cpu / frames(single)), 3),
      perThread: per(p.perThread),
      sleepPerThread: per(p.sleep),
    };
  }
  const singleFrameMs = (longSingle.conversations[0]!.wallMs - single.conversations[0]!.wallMs) / sf;
  const pipe = (lp.outside - p.outside) / pf;
  const solo = (ls.outside - s.outside) / sf;
  const per = (a: Record<string, number>, b: Record<string, number>) =>
    Object.fromEntries(Object.keys(a).map((k) => [k, round(((b[k] ?? 0) - (a[k] ?? 0)) / pf, 4)]));
  return {
    frames: [frames(one), frames(longOne)],
    pipelineMsPerFrame: round(pipe, 4),
    singleMsPerFrame: round(solo, 4),
    singleFrameMs: round(singleFrameMs, 3),
    overSingleFrame: round((pipe - solo) / singleFrameMs, 4),
    shortRunOverSingleFrame: round(shortRun, 4),
    cpuOverSingle: round((lp.cpu - p.cpu) / pf / ((ls.cpu - s.cpu) / sf), 3),
    perThread: per(p.perThread, lp.perThread),
    sleepPerThread: per(p.sleep, lp.sleep),
  };
}

export interface PlacementRow {
  cpus: number;
  /** The default placement on these CPUs, as the run's report gives it (stage@cpus, helpers counted). */
  placement: string;
  /** Steady ms per frame (median of the rounds, and the range): default placement, one thread per stage, the engine's own frame with a thread per CPU. */
  defaultFrameMs: Spread;
  oneThreadFrameMs: Spread;
  engineFrameMs: Spread;
  /** Medians: the default over one thread per stage, and over the engine's own frame. */
  defaultOverOneThread: number;
  defaultOverEngine: number;
}

/** A child process under `taskset -c cpus`; its stdout. */
function pinned(cpus: readonly number[], args: string[]): string {
  const r = spawnSync('taskset', ['-c', cpus.join(','), process.execPath, ...args], { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (r.error !== undefined || r.status !== 0)
    throw new Error(`bench pipeline: taskset ${args.join(' ')}: ${r.error?.message ?? r.stderr.trim().split('\n').pop()}`);
  return r.stdout;
}

/** `voxslab run` of one conversation on `cpus` with a short and a long reply: the steady frame and the placement. */
function pinnedSteady(model: string, cpus: readonly number[], extra: string[], dir: string): { frameMs: number; placement: string } {
  const reports = ['4', LONG_REPLY].map((reply) => {
    const rep = join(dir, `p${reply}.json`);
    pinned(cpus, [CLI, 'run', '--model', model, '--in', FIXTURE, '--out', join(dir, 'p.wav'), '--reply', reply, '--report', rep, ...extra]);
    return JSON.parse(readFileSync(rep, 'utf8')) as RunReport & { pipeline: { placement: { stage: string; affinity: number[]; helpers: number[][] }[] } };
  });
  const placement = reports[1]!.pipeline.placement
    .map((w) => `${w.stage}@${w.affinity.join('+')}${w.helpers.length > 0 ? ` (+${w.helpers.length})` : ''}`)
    .join(' ');
  return { frameMs: steadyFrameMs(reports[0]!, reports[1]!), placement };
}

/**
 * The default placement against one thread per stage and against the engine alone, for 1, 2,
 * 4 and 8 CPUs (those this process may use), each run in a child process under taskset,
 * alternating, 3 rounds (1 with --quick).
 */
export function placement(model: string, quick: boolean): { rows: PlacementRow[]; untried: number[] } {
  const allowed = native.allowedCpus();
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-bench-'));
  const rows: PlacementRow[] = [];
  try {
    for (const k of [1, 2, 4, 8].filter((k) => k <= allowed.length)) {
      const cpus = allowed.slice(0, k);
      const d: number[] = [];
      const one: number[] = [];
      const engine: number[] = [];
      let where = '';
      for (let r = 0; r < (quick ? 1 : 3); r++) {
        const p = pinnedSteady(model, cpus, [], dir);
        where = p.placement;
        d.push(p.frameMs);
        one.push(pinnedSteady(model, cpus, ['--threads', '1'], dir).frameMs);
        engine.push((JSON.parse(pinned(cpus, [ENGINE_FRAME, model, String(Math.min(8, k)), quick ? 'quick' : ''])) as { frameMs: number }).frameMs);
      }
      const [sd, so, se] = [spread(d, 3), spread(one, 3), spread(engine, 3)];
      rows.push({
        cpus: k,
        placement: where,
        defaultFrameMs: sd,
        oneThreadFrameMs: so,
        engineFrameMs: se,
        defaultOverOneThread: round(sd.median / so.median, 3),
        defaultOverEngine: round(sd.median / se.median, 3),
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { rows, untried: [1, 2, 4, 8].filter((k) => k > allowed.length) };
}

async function wake(rounds: number): Promise<{ ring: { p50: number; p99: number }; message: { p50: number; p99: number } }> {
  const url = new URL('./workers/pingpong.js', import.meta.url);
  const q = (xs: number[], p: number) => round(xs.sort((a, b) => a - b)[Math.floor(p * (xs.length - 1))]! / 2, 2);
  // Rings: main writes ping (bell 1 = worker), waits on pong (bell 0 = main).
  const cap = 64;
  const buf = new SharedArrayBuffer(2 * ringBytes(cap));
  const bellsBuf = new SharedArrayBuffer(8);
  const bells = new Doorbells(new Int32Array(bellsBuf));
  const ping = RecordRing.init({ buffer: buf, byteOffset: 0, capacity: cap }, bells, 0, 1);
  const pong = RecordRing.init({ buffer: buf, byteOffset: ringBytes(cap), capacity: cap }, bells, 1, 0);
  const w = new Worker(url, { workerData: { mode: 'ring', ping: ping.share(), pong: pong.share(), bells: bellsBuf, rounds } });
  await new Promise((r) => w.once('online', r));
  const one = new Int32Array(1);
  const ringUs: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    ping.write(1, one, 0, 1);
    for (;;) {
      const seen = bells.read(0);
      if (pong.peekKind() >= 0) break;
      // The main thread of this bench may block: it is a benchmark, not the event loop of a server.
      Atomics.wait(bells.words, 0, seen, 1000);
    }
    pong.read(one, 0);
    ringUs.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  await new Promise((r) => w.once('exit', r));
  const m = new Worker(url, { workerData: { mode: 'message', rounds } });
  await new Promise((r) => m.once('online', r));
  const msgUs: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    await new Promise<void>((resolve) => {
      m.once('message', () => resolve());
      m.postMessage(i);
    });
    msgUs.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  await new Promise((r) => m.once('exit', r));
  return { ring: { p50: q(ringUs, 0.5), p99: q(ringUs, 0.99) }, message: { p50: q(msgUs, 0.5), p99: q(msgUs, 0.99) } };
}

export async function run(o: {
  quick: boolean;
  production?: boolean;
}): Promise<{ rows: PipelineBenchRow[]; wakeMicros: Awaited<ReturnType<typeof wake>>; placement: ReturnType<typeof placement> & { checkpoint: string } }> {
  const log = (l: string) => process.stderr.write(`${l}\n`);
  const models: [string, string][] = (o.quick ? ['tiny'] : ['tiny', 'small']).map((n) => [n, resolveModel(n, log)]);
  if (o.production === true) for (const d of ['q4', 'q8'] as const) models.push([`lfm2-audio-1.5b ${d}`, await production(d, log)]);
  const rows: PipelineBenchRow[] = [];
  const scratch = mkdtempSync(join(tmpdir(), 'voxslab-bench-'));
  const short = join(scratch, 'short.wav');
  writeFileSync(short, encodeWav({ sampleRate: 16000, channels: 1, format: 'pcm16', extensible: false }, readFixture().subarray(0, 19200)));
  try {
    for (const [name, model] of models) rows.push(await measure(name, model, o, short));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  // Placement on the production shape at q4 when it is measured, else the largest built-in.
  const [name, dir] = models.find(([n]) => n.endsWith('q4')) ?? models[models.length - 1]!;
  return { rows, wakeMicros: await wake(o.quick ? 2000 : 20000), placement: { checkpoint: name, ...placement(dir, o.quick) } };
}

/** The fixture's samples at 16 kHz, mono. */
function readFixture(): Float32Array {
  const src = openFileSource(FIXTURE);
  try {
    const r = new WavReader(src, 4096);
    if (r.info.sampleRate !== 16000) throw new Error(`bench: ${FIXTURE} is not 16 kHz`);
    const all = new Float32Array(r.info.frames);
    let n = 0;
    for (let k = r.readMono(all.subarray(n), 4096); k > 0; k = r.readMono(all.subarray(n), 4096)) n += k;
    return all.subarray(0, n);
  } finally {
    src.close();
  }
}

interface CapacityTry {
  conversations: number;
  p99GapMs: number;
  underrunMs: number;
  /** The latest first reply sample after the inputs ended (ms). */
  lastFirstAudioMs: number;
  /**
   * Every conversation stayed real-time: a player started at its reply's first sample never ran
   * dry, and every reply began within one reply's length (REPLY_SECONDS) of the inputs' end, so
   * the replies played at once, not one after another.
   */
  realTime: boolean;
  accountedMiB: number;
  rssMiB: number;
}

/**
 * The most simultaneous conversations (the same 4 s reply each) that all stay real-time, up to
 * `limit`: doubling from one until a run fails, then bisection between the last that passed
 * and the first that failed.
 */
export async function capacitySearch(
  model: string,
  limit: number,
): Promise<{ tries: CapacityTry[]; capacity: number; perConversation: { accountedMiB: number; rssMiB: number } }> {
  const tries: CapacityTry[] = [];
  const attempt = async (n: number): Promise<boolean> => {
    const r = await runOnce(model, n, { reply: String(REPLY_SECONDS) });
    const p99 = Math.max(...r.report.conversations.map((c) => c.frameIntervalMs?.p99 ?? Number.POSITIVE_INFINITY));
    const cs = r.report.conversations;
    const late = Math.max(...cs.map((c) => c.underrunMs));
    const lastFirst = Math.max(...cs.map((c) => c.firstAudioMs ?? Number.POSITIVE_INFINITY));
    // Not the frame gaps: a reply's text steps (6 between every 12 frames) leave gaps longer than
    // a frame in a reply generated faster than it plays. And not underruns alone: a stage that
    // started the replies one after another would never underrun.
    const realTime = late === 0 && lastFirst < 1000 * REPLY_SECONDS;
    tries.push({
      conversations: n,
      p99GapMs: round(p99, 2),
      underrunMs: round(late, 2),
      lastFirstAudioMs: round(lastFirst, 1),
      realTime,
      accountedMiB: round(r.report.manifest.totals.slab / 2 ** 20, 1),
      rssMiB: round(r.rssMiB, 1),
    });
    return realTime;
  };
  let good = 0;
  let bad = 0;
  for (let n = 1; ; n = Math.min(2 * n, limit)) {
    if (await attempt(n)) good = n;
    else {
      bad = n;
      break;
    }
    if (n === limit) break;
  }
  while (bad - good > 1) {
    const mid = (good + bad) >> 1;
    if (await attempt(mid)) good = mid;
    else bad = mid;
  }
  const sorted = [...tries].sort((a, b) => a.conversations - b.conversations);
  const [lo, hi] = [sorted[0]!, sorted[sorted.length - 1]!];
  const span = Math.max(1, hi.conversations - lo.conversations);
  return {
    tries,
    capacity: good,
    perConversation: { accountedMiB: round((hi.accountedMiB - lo.accountedMiB) / span, 2), rssMiB: round((hi.rssMiB - lo.rssMiB) / span, 1) },
  };
}

async function measure(name: string, model: string, o: { quick: boolean }, short: string): Promise<PipelineBenchRow> {
  // The 1.5B shape takes seconds per run: no long-reply overhead rounds.
  const big = name.startsWith('lfm2');
  const repeats = o.quick ? 1 : 2;
  // Rounds alternate the runs, so a slow spell of a shared machine does not fall on one of them only.
  let single: Run | null = null;
  let one: Run | null = null;
  let two: Run | null = null;
  let mixed: Run | null = null;
  // The overhead of each round from its own runs, a short and a long reply on each engine (not on the 1.5B shape: minutes).
  const overheads: Overhead[] = [];
  for (let r = 0; r < repeats; r++) {
    const s = await runOnce(model, 1, { engine: 'single' });
    const p = await runOnce(model, 1, {});
    single = faster(single, s);
    one = faster(one, p);
    two = faster(two, await runOnce(model, 2, {}));
    mixed = faster(mixed, await runOnce(model, 2, { inputs: [FIXTURE, short] }));
    if (!big) {
      const ls = await runOnce(model, 1, { engine: 'single', reply: LONG_REPLY });
      const lp = await runOnce(model, 1, { reply: LONG_REPLY });
      const o = overheadOf(s.report, p.report, ls.report, lp.report);
      if (o !== null) overheads.push(o);
    }
  }
  if (single === null || one === null || two === null || mixed === null) throw new Error('bench pipeline: no rounds');
  const threads = optionValue<number>('threads', undefined);
  const long = await runOnce(model, 1, { reply: LONG_REPLY });
  const longSingle = await runOnce(model, 1, { engine: 'single', reply: LONG_REPLY });
  const engineFrame = engineFrameMs(model, threads, o.quick);
  const pipelineFrame = steadyFrameMs(one.report, long.report);
  const rt = await runOnce(model, 1, { realtime: true, reply: '1' });
  const { tries: capacity, capacity: capacityRealTime, perConversation } = await capacitySearch(model, o.quick ? 4 : CAPACITY_LIMIT);
  const engine = await load(model);
  const calibrated = engine.capacity;
  await engine.close();
  const c0 = one.report.conversations[0]!;
  const stages = one.report.pipeline!.stages;
  const depth = mixed.report.pipeline!.stages.find((s) => s.stage === 'depthformer')!;
  return {
    checkpoint: name,
    threads,
    pipelineFrameMs: round(pipelineFrame, 3),
    singleFrameMs: round(steadyFrameMs(single.report, longSingle.report), 3),
    engineFrameMs: round(engineFrame, 3),
    pipelineOverEngineFrame: round(pipelineFrame / engineFrame, 3),
    steadyRealTimeFactor: round(pipelineFrame / 80, 4),
    singleMsPerFrame: round(msPerFrame(single.report), 3),
    pipelineMsPerFrame: round(msPerFrame(one.report), 3),
    pipelineOverSingle: round(msPerFrame(one.report) / msPerFrame(single.report), 3),
    twoMsPerFrame: round(msPerFrame(two.report), 3),
    twoOverOne: round(Math.max(...two.report.conversations.map((c) => c.wallMs)) / c0.wallMs, 3),
    mixedOverOne: round((2 * msPerFrame(mixed.report)) / msPerFrame(one.report), 3),
    twoStepsOverOne: round(replyMsPerFrame(two.report) / replyMsPerFrame(one.report), 3),
    mixedStepsOverOne: round(replyMsPerFrame(mixed.report) / replyMsPerFrame(one.report), 3),
    mixedHeadsBatched: depth.batchedSteps > 0 ? round((depth.batchedTextHeads + depth.batchedFrames) / depth.batchedSteps, 3) : 0,
    realTimeFactor: round(c0.realTimeFactor ?? 0, 4),
    realtimeFirstAudioMs: rt.report.conversations[0]!.firstAudioMs,
    frameGapMs: c0.frameIntervalMs === null ? null : { p50: c0.frameIntervalMs.p50, p99: c0.frameIntervalMs.p99 },
    stageMsPerCall: perCall(c0.timings),
    busyMs: Object.fromEntries(stages.map((s) => [s.stage, round(s.busyMs, 1)])),
    // The higher of the rounds: a shared machine's noise only adds to it.
    overhead: overheads.length === 0 ? null : overheads.reduce((a, b) => (b.overSingleFrame > a.overSingleFrame ? b : a)),
    overheadRounds: overheads.map((o) => o.overSingleFrame),
    ringMaxUsed: Object.fromEntries(Object.entries(one.report.pipeline!.rings[0]!).map(([k, v]) => [k, `${v.maxUsed}/${v.capacity}`])),
    rssMiB: round(one.rssMiB, 1),
    accountedMiB: round(one.report.manifest.totals.slab / 2 ** 20, 1),
    capacity,
    capacityRealTime,
    perConversation,
    capacityCalibrated: calibrated.conversations,
    calibration: { rows: calibrated.rows, frameMs: calibrated.frameMs.map((ms) => round(ms, 2)) },
  };
}

export function format(r: Awaited<ReturnType<typeof run>>): string {
  const lines = ['pipeline (voxslab run, fixture hello.wav, reply 4 s); single = the one-thread engine in the same run'];
  for (const x of r.rows) {
    lines.push(
      `${x.checkpoint}: ${x.singleMsPerFrame} ms/frame single, ${x.pipelineMsPerFrame} pipeline (×${x.pipelineOverSingle}); two at once ` +
        `${x.twoMsPerFrame} ms/frame, wall ×${x.twoOverOne} of one; two of different lengths: frame time ×${x.mixedOverOne} of one ` +
        `(heads batched in ${Math.round(x.mixedHeadsBatched * 100)}% of batched steps); RTF ${x.realTimeFactor}`,
      `  steady frame (${LONG_REPLY} s reply less 4 s): pipeline ${x.pipelineFrameMs} ms, single ${x.singleFrameMs}; the engine's own frame ` +
        `${x.engineFrameMs} ms (${x.threads} threads) ⇒ pipeline ×${x.pipelineOverEngineFrame} of it, RTF ${x.steadyRealTimeFactor}`,
      `  Depthformer stage's reply work per frame, two ÷ one: ×${x.twoStepsOverOne} same input, ×${x.mixedStepsOverOne} different lengths`,
      `  first audio after end of speech (device pace): ${x.realtimeFirstAudioMs ?? '-'} ms; frame gaps p50 ${x.frameGapMs?.p50 ?? '-'} / p99 ` +
        `${x.frameGapMs?.p99 ?? '-'} ms`,
      `  per call (ms): ${Object.entries(x.stageMsPerCall)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
      `  worker busy (ms): ${Object.entries(x.busyMs)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
      x.overhead === null
        ? '  overhead: not measured (no per-thread CPU clock here, or the 1.5B shape)'
        : `  overhead by CPU clocks, per frame ${x.overhead.frames[0] === x.overhead.frames[1] ? `over ${x.overhead.frames[0]} frames (the reply stops there)` : `from ${x.overhead.frames[0]} to ${x.overhead.frames[1]} frames`}: ${x.overhead.pipelineMsPerFrame} ms outside compute ` +
            `(single ${x.overhead.singleMsPerFrame}; its frame ${x.overhead.singleFrameMs} ms) ⇒ ${round(100 * x.overhead.overSingleFrame, 2)}% of the single frame ` +
            `(rounds ${x.overheadRounds.map((v) => `${round(100 * v, 2)}%`).join(', ')}; the short run alone, start-up included, ` +
            `${round(100 * x.overhead.shortRunOverSingleFrame, 2)}%); all CPU ×${x.overhead.cpuOverSingle} single; per thread (ms/frame, of it asleep/waking): ` +
            `${Object.entries(x.overhead.perThread)
              .map(([k, v]) => `${k} ${v} (${x.overhead!.sleepPerThread[k] ?? '-'})`)
              .join(', ')}`,
      `  rings max used: ${Object.entries(x.ringMaxUsed)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
      `  RSS ${x.rssMiB} MiB (process, model image included), accounted ${x.accountedMiB} MiB`,
      `  capacity (doubling, then bisection): ${x.capacity.map((c) => `${c.conversations} → underrun ${c.underrunMs} ms, last first audio ${c.lastFirstAudioMs} ms${c.realTime ? '' : ' ✗'}`).join('; ')} ⇒ ` +
        `${x.capacityRealTime} real-time; per added conversation ${x.perConversation.accountedMiB} MiB accounted, ${x.perConversation.rssMiB} MiB RSS`,
      `  compute capacity as load() measures it: ${x.capacityCalibrated} (a frame of ${x.calibration.rows.join(', ')} at once: ` +
        `${x.calibration.frameMs.join(', ')} ms)`,
    );
  }
  const pl = r.placement;
  const sp = (s: Spread) => `${s.median} (${s.min}–${s.max})`;
  lines.push(`placement (${pl.checkpoint}, taskset; steady ms per frame, median (range)):`);
  for (const p of pl.rows)
    lines.push(
      `  ${p.cpus} CPU${p.cpus > 1 ? 's' : ''}: default ${sp(p.defaultFrameMs)}, one thread per stage ${sp(p.oneThreadFrameMs)}, engine alone ${sp(p.engineFrameMs)} ⇒ ` +
        `default ×${p.defaultOverOneThread} of one thread per stage, ×${p.defaultOverEngine} of the engine; ${p.placement}`,
    );
  if (pl.untried.length > 0) lines.push(`  not tried (this process may use fewer CPUs): ${pl.untried.join(', ')}`);
  const w = r.wakeMicros;
  lines.push(`wake latency one way (µs): rings+doorbells p50 ${w.ring.p50} / p99 ${w.ring.p99}; postMessage p50 ${w.message.p50} / p99 ${w.message.p99}`);
  return lines.join('\n');
}
