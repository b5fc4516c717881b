/**
 * The two-conversation soak: conversations A and B on one engine (the five stage workers) talk
 * to each other on the tiny model — each reply is the other's next input — for a fixed time.
 * It holds when
 * - no stage worker constructs a buffer or typed array after readiness (the constructor trap),
 * - after warm-up the live JS heap of the main thread and of every worker (after a full
 *   collection) grows by less than 1 MiB, and so do the ArrayBuffer bytes each of them holds,
 *   the C allocator's bytes in use (every thread's native heap) and the memory outside the JS
 *   heaps (the growth of the process RSS, with the allocator's free memory given back first,
 *   less that of what the heaps hold: native memory, buffers, stacks),
 * - closing both conversations returns the ledger to its baseline, and closing the engine to 0,
 * - the same exchange replayed on a fresh engine without the harness gives the same bytes.
 *
 *   node dist/test/soak/soak.js [--seconds N | --minutes N] [--json]      (npm run soak -- ...)
 *
 * Growth is the median of the last sixth of the samples less that of the first sixth: one RSS
 * sample moves by megabytes as V8 sizes six heaps, and a median of many does not. The heaps'
 * committed bytes are reported, not gated: V8 grows and shrinks them with the garbage, and what
 * is live in them is gated. What the heaps hold in RSS lies between what they have committed
 * now and their high-water marks: a heap that shrinks gives its pages to V8's page pool, where
 * they stay resident until V8 lets them go. So the growth outside the heaps is the smaller of
 * RSS's growth over each bound; memory that grows outside them raises both.
 *
 * Exit 0 when every check holds, 1 otherwise; the last line says which.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import v8 from 'node:v8';
import vm from 'node:vm';
import { scratchDir } from '../helpers.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const { makeCheckpoint } = await import('../../src/io/checkpoint.js');
const { load } = await import('../../src/index.js');
const { loadWithHooks } = await import('../../src/api/engine.js');
const { resampleSignal } = await import('../../src/dsp/resample.js');
const { readWavSamples } = await import('../helpers.js');
const { median } = await import('../../bench/util.js');
const { native } = await import('../../src/native.js');
type Engine = Awaited<ReturnType<typeof load>>;
type Conv = Awaited<ReturnType<Engine['open']>>;

const { values } = parseArgs({ options: { seconds: { type: 'string' }, minutes: { type: 'string' }, json: { type: 'boolean' } } });
const seconds = values.minutes !== undefined ? Number(values.minutes) * 60 : Number(values.seconds ?? 60);
if (!(seconds >= 5 && seconds <= 24 * 3600)) {
  console.error('soak: --seconds must be 5..86400 (or --minutes)');
  process.exit(2);
}
const MiB = 1 << 20;
const WARMUP = Math.min(Math.max(0.25 * seconds, 15), 60, seconds / 2);

const work = scratchDir('voxslab-soak-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 7, out: model, dtype: 'f32' });
const fixture = readWavSamples(fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url)));
const options = { replySeconds: 2, memoryLimit: '1GiB' } as const;

/** One turn on `conv`: writes `input`, ends the turn, returns the reply's samples. */
async function turn(conv: Conv, input: Float32Array, parts: Float32Array[]): Promise<Float32Array> {
  parts.length = 0;
  for (let at = 0; at < input.length; at += 4800) conv.write(input.subarray(at, at + 4800));
  conv.endTurn();
  await conv.nextTurn();
  const n = parts.reduce((a, p) => a + p.length, 0);
  const out = new Float32Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * The replies' bytes, chained: one running SHA-256 over every reply, with a checkpoint every
 * 256 turns so a replay that differs is placed within 256 turns. Held in buffers sized before
 * the run, so the harness's own record does not grow with it.
 */
class Transcript {
  static readonly EVERY = 256;
  readonly #hash = createHash('sha256');
  readonly #checkpoints: Uint8Array;
  readonly #length = new DataView(new ArrayBuffer(8));
  turns = 0;
  constructor(maxTurns: number) {
    this.#checkpoints = new Uint8Array((Math.ceil(maxTurns / Transcript.EVERY) + 1) * 32);
  }
  add(reply: Float32Array): void {
    this.#length.setFloat64(0, reply.length);
    this.#hash.update(this.#length).update(new Uint8Array(reply.buffer, reply.byteOffset, reply.byteLength));
    this.turns++;
    const k = this.turns / Transcript.EVERY;
    if (Number.isInteger(k) && (k + 1) * 32 <= this.#checkpoints.length) this.#checkpoints.set(this.#hash.copy().digest(), k * 32);
  }
  /** The first turn of the 256 where `other` differs, or -1 when both record the same bytes. */
  firstDifference(other: Transcript): number {
    if (other.turns !== this.turns) return Math.min(other.turns, this.turns);
    const n = Math.floor(this.turns / Transcript.EVERY);
    for (let k = 1; k <= n && (k + 1) * 32 <= this.#checkpoints.length; k++) {
      const a = this.#checkpoints.subarray(k * 32, k * 32 + 32);
      if (!a.every((x, i) => x === other.#checkpoints[k * 32 + i])) return (k - 1) * Transcript.EVERY;
    }
    const same = this.#hash.copy().digest().equals(other.#hash.copy().digest());
    return same ? -1 : n * Transcript.EVERY;
  }
}

/**
 * A and B alternate: A hears the fixture first, then each reply is the other's input (the
 * fixture again after an empty reply). Runs `turns` turns, or until `until` (ms) when turns is 0.
 */
async function exchange(engine: Engine, transcript: Transcript, turns: number, until: number, each?: () => Promise<void>): Promise<void> {
  const rate = engine.outputRate;
  const first = resampleSignal(fixture.samples, fixture.rate, rate);
  const convs = [await engine.open({ inputRate: rate, seed: 1 }), await engine.open({ inputRate: rate, seed: 2 })];
  const parts: Float32Array[] = [];
  for (const c of convs) c.on('audio', (e) => parts.push(e.pcm as Float32Array));
  let input = first;
  for (let i = 0; turns > 0 ? i < turns : performance.now() < until; i++) {
    const reply = await turn(convs[i % 2]!, input, parts);
    transcript.add(reply);
    input = reply.length > 0 ? reply : first;
    await each?.();
  }
  for (const c of convs) await c.close();
}

const STAGES = ['capture', 'frontend', 'conformer', 'depthformer', 'playback'] as const;
/**
 * Columns of a sample: time, RSS, the C allocator's bytes in use, then the main thread's live
 * heap, committed heap and ArrayBuffer bytes, then each stage's three.
 */
const COLUMNS = 3 + 3 * (1 + STAGES.length);
const MAIN = 3;

/** Samples in a table sized before the run: one every `interval` s after warm-up, and a last one. */
class Samples {
  readonly table: Float64Array;
  count = 0;
  constructor(
    readonly interval: number,
    span: number,
  ) {
    this.table = new Float64Array((Math.ceil(span / interval) + 2) * COLUMNS);
  }
  get full(): boolean {
    return (this.count + 1) * COLUMNS > this.table.length;
  }
  get lastAt(): number {
    return this.count === 0 ? -Infinity : (this.table[(this.count - 1) * COLUMNS] as number);
  }
  /** Column `c` of every sample. */
  column(c: number): Float64Array {
    const out = new Float64Array(this.count);
    for (let i = 0; i < this.count; i++) out[i] = this.table[i * COLUMNS + c] as number;
    return out;
  }
}

async function sample(engine: Engine, t0: number, into: Samples): Promise<void> {
  gc();
  const stats = await engine.pipeline.stats();
  native.mallocTrim();
  const m = process.memoryUsage();
  const row = into.table.subarray(into.count * COLUMNS, (into.count + 1) * COLUMNS);
  row[0] = (performance.now() - t0) / 1000;
  row[1] = m.rss;
  row[2] = native.mallocInUseBytes();
  row[MAIN] = m.heapUsed;
  row[MAIN + 1] = v8.getHeapStatistics().total_physical_size;
  row[MAIN + 2] = m.arrayBuffers;
  for (const s of stats) {
    const at = MAIN + 3 + 3 * STAGES.indexOf(s.stage as (typeof STAGES)[number]);
    row[at] = s.heapDelta;
    row[at + 1] = s.heapCommitted;
    row[at + 2] = s.arrayBuffers;
  }
  into.count++;
}

/** Median of the last sixth of `v` less the median of its first sixth. */
function growth(v: Float64Array): number {
  const k = Math.max(1, Math.floor(v.length / 6));
  return median(Array.from(v.subarray(v.length - k))) - median(Array.from(v.subarray(0, k)));
}

const failures: string[] = [];
const t0 = performance.now();
const engine = await loadWithHooks(model, options, { trapAllocations: true });
const base = engine.snapshot().held.total;
// Tiny runs some 30 turns a second; the bound only sizes the transcript's checkpoints.
const transcript = new Transcript(seconds * 200);
const samples = new Samples(Math.max(0.15, (seconds - WARMUP) / 1000), seconds - WARMUP);
await exchange(engine, transcript, 0, t0 + seconds * 1000, async () => {
  const now = (performance.now() - t0) / 1000;
  if (now >= WARMUP && now - samples.lastAt >= samples.interval && !samples.full) await sample(engine, t0, samples);
});
const stats = await engine.pipeline.stats();
const afterClose = engine.snapshot().held.total;
await engine.close();
const afterEngine = engine.snapshot().held.total;

const trapped = Object.fromEntries(stats.map((s) => [s.stage, s.allocationsAfterReady]));
for (const [stage, n] of Object.entries(trapped)) if (n !== 0) failures.push(`${stage}: ${n} constructor calls after readiness`);
const rss = samples.column(1);
// The six heaps' committed bytes, and what they hold resident: each one's high-water mark (see above).
const committed = new Float64Array(samples.count);
const resident = new Float64Array(samples.count);
for (let k = 0; k <= STAGES.length; k++) {
  const c = samples.column(MAIN + 1 + 3 * k);
  let high = 0;
  for (let i = 0; i < c.length; i++) {
    high = Math.max(high, c[i] as number);
    committed[i] = (committed[i] as number) + (c[i] as number);
    resident[i] = (resident[i] as number) + high;
  }
}
const drift = {
  heap: growth(samples.column(MAIN)),
  outsideHeaps: Math.min(growth(rss.map((v, i) => v - (committed[i] as number))), growth(rss.map((v, i) => v - (resident[i] as number)))),
  rss: growth(rss),
  heapsCommitted: growth(committed),
  heapsResident: growth(resident),
  mallocInUse: growth(samples.column(2)),
  arrayBuffers: growth(samples.column(MAIN + 2)),
  workers: Object.fromEntries(STAGES.map((name, k) => [name, growth(samples.column(MAIN + 3 + 3 * k))])),
  workerArrayBuffers: Object.fromEntries(STAGES.map((name, k) => [name, growth(samples.column(MAIN + 5 + 3 * k))])),
};
// The allocator's figures exist with glibc; elsewhere the column holds -1 throughout.
const mallocKnown = samples.count > 0 && (samples.table[2] as number) >= 0;
// Growth is the failure: memory handed back after warm-up (a negative drift) is not a leak.
if (samples.count < 12) failures.push(`only ${samples.count} samples after warm-up (at least 12 needed)`);
if (drift.heap >= MiB) failures.push(`main thread heap grew ${drift.heap} bytes`);
if (drift.arrayBuffers >= MiB) failures.push(`main thread ArrayBuffers grew ${drift.arrayBuffers} bytes`);
if (drift.outsideHeaps >= MiB) failures.push(`memory outside the JS heaps grew ${drift.outsideHeaps} bytes`);
if (mallocKnown && drift.mallocInUse >= MiB) failures.push(`the C allocator's bytes in use grew ${drift.mallocInUse} bytes`);
for (const [k, v] of Object.entries(drift.workers)) if (v >= MiB) failures.push(`${k} worker heap grew ${v} bytes`);
for (const [k, v] of Object.entries(drift.workerArrayBuffers)) if (v >= MiB) failures.push(`${k} worker ArrayBuffers grew ${v} bytes`);
if (afterClose !== base) failures.push(`ledger after closing both conversations: ${afterClose} bytes, baseline ${base}`);
if (afterEngine !== 0) failures.push(`ledger after closing the engine: ${afterEngine} bytes`);

// The same exchange without the harness: no trap, no sampling, no collections.
const plain = await load(model, options);
const replay = new Transcript(transcript.turns);
await exchange(plain, replay, transcript.turns, 0);
await plain.close();
const firstDiff = transcript.firstDifference(replay);
if (firstDiff >= 0) failures.push(`the replay's bytes differ from turn ${firstDiff} on`);

const report = {
  seconds,
  warmupSeconds: WARMUP,
  turns: transcript.turns,
  samples: samples.count,
  trapped,
  drift,
  ledger: { baseline: base, afterClose, afterEngine },
  replayIdentical: firstDiff < 0,
  failures,
};
if (values.json === true) console.log(JSON.stringify(report, null, 2));
else {
  console.log(`soak: ${transcript.turns} turns in ${seconds} s (warm-up ${WARMUP} s, ${samples.count} samples)`);
  console.log(`  constructor calls after readiness: ${JSON.stringify(trapped)}`);
  console.log(`  growth after warm-up (median of the last sixth less the first's): heap ${drift.heap} B, workers ${JSON.stringify(drift.workers)}`);
  console.log(`  ArrayBuffers: main ${drift.arrayBuffers} B, workers ${JSON.stringify(drift.workerArrayBuffers)}`);
  console.log(
    `  outside the JS heaps ${drift.outsideHeaps} B, C allocator in use ${mallocKnown ? `${drift.mallocInUse} B` : 'unknown'}; not gated: RSS ${drift.rss} B, heaps' committed bytes ${drift.heapsCommitted} B (high-water ${drift.heapsResident} B)`,
  );
  console.log(`  ledger: baseline ${base}, after closing the conversations ${afterClose}, after closing the engine ${afterEngine}`);
  console.log(`  replay without the harness: ${firstDiff < 0 ? 'identical bytes' : `differs from turn ${firstDiff} on`}`);
}
console.log(failures.length === 0 ? 'soak: ok' : `soak: FAILED — ${failures.join('; ')}`);
process.exit(failures.length === 0 ? 0 : 1);
