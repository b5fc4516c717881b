/**
 * The two-conversation soak: conversations A and B on one engine (the five stage workers) talk
 * to each other on the tiny model — each reply is the other's next input — for a fixed time.
 * It holds when
 * - no stage worker constructs a buffer or typed array after readiness (the constructor trap),
 * - after warm-up the JS heap of the main thread and of every worker, and the process RSS, grow
 *   by less than 1 MiB (heaps measured after a full collection),
 * - closing both conversations returns the ledger to its baseline, and closing the engine to 0,
 * - the same exchange replayed on a fresh engine without the harness gives the same bytes.
 *
 *   node dist/test/soak/soak.js [--seconds N | --minutes N] [--json]      (npm run soak -- ...)
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
const { resampleSignal } = await import('../../src/dsp/resample.js');
const { readWavSamples } = await import('../helpers.js');
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
 * A and B alternate: A hears the fixture first, then each reply is the other's input (the
 * fixture again after an empty reply). Runs `turns` turns, or until `until` (ms) when turns is 0.
 */
async function exchange(engine: Engine, turns: number, until: number, each?: (i: number) => Promise<void>): Promise<string[]> {
  const rate = engine.outputRate;
  const first = resampleSignal(fixture.samples, fixture.rate, rate);
  const convs = [await engine.open({ inputRate: rate, seed: 1 }), await engine.open({ inputRate: rate, seed: 2 })];
  const parts: Float32Array[] = [];
  for (const c of convs) c.on('audio', (e) => parts.push(e.pcm as Float32Array));
  const hashes: string[] = [];
  let input = first;
  for (let i = 0; turns > 0 ? i < turns : performance.now() < until; i++) {
    const reply = await turn(convs[i % 2]!, input, parts);
    hashes.push(
      createHash('sha256')
        .update(new Uint8Array(reply.buffer, reply.byteOffset, reply.byteLength))
        .digest('hex'),
    );
    input = reply.length > 0 ? reply : first;
    await each?.(i);
  }
  for (const c of convs) await c.close();
  return hashes;
}

interface Sample {
  at: number;
  heap: number;
  rss: number;
  workers: Record<string, number>;
}

async function sample(engine: Engine, t0: number): Promise<Sample> {
  gc();
  const stats = await engine.pipeline.stats();
  const workers: Record<string, number> = {};
  for (const s of stats) workers[s.stage] = s.heapDelta;
  const m = process.memoryUsage();
  return { at: (performance.now() - t0) / 1000, heap: m.heapUsed, rss: m.rss, workers };
}

const failures: string[] = [];
const t0 = performance.now();
const engine = await load(model, { ...options, trapAllocations: true });
const base = engine.snapshot().held.total;
const samples: Sample[] = [];
const hashes = await exchange(engine, 0, t0 + seconds * 1000, async (i) => {
  const now = (performance.now() - t0) / 1000;
  if (now >= WARMUP && (samples.length === 0 || i % 4 === 0)) samples.push(await sample(engine, t0));
});
samples.push(await sample(engine, t0));
const stats = await engine.pipeline.stats();
const afterClose = engine.snapshot().held.total;
await engine.close();
const afterEngine = engine.snapshot().held.total;

const trapped = Object.fromEntries(stats.map((s) => [s.stage, s.allocationsAfterReady]));
for (const [stage, n] of Object.entries(trapped)) if (n !== 0) failures.push(`${stage}: ${n} constructor calls after readiness`);
const first = samples[0]!;
const last = samples[samples.length - 1]!;
const drift = {
  heap: last.heap - first.heap,
  rss: last.rss - first.rss,
  workers: Object.fromEntries(Object.keys(last.workers).map((k) => [k, last.workers[k]! - first.workers[k]!])),
};
// Growth is the failure: memory handed back after warm-up (a negative drift) is not a leak.
if (drift.heap >= MiB) failures.push(`main thread heap grew ${drift.heap} bytes`);
if (drift.rss >= MiB) failures.push(`RSS grew ${drift.rss} bytes`);
for (const [k, v] of Object.entries(drift.workers)) if (v >= MiB) failures.push(`${k} worker heap grew ${v} bytes`);
if (afterClose !== base) failures.push(`ledger after closing both conversations: ${afterClose} bytes, baseline ${base}`);
if (afterEngine !== 0) failures.push(`ledger after closing the engine: ${afterEngine} bytes`);

// The same exchange without the harness: no trap, no sampling, no collections.
const plain = await load(model, options);
const replay = await exchange(plain, hashes.length, 0);
await plain.close();
const firstDiff = hashes.findIndex((h, i) => h !== replay[i]);
if (firstDiff >= 0) failures.push(`turn ${firstDiff}: the replay's bytes differ`);

const report = {
  seconds,
  warmupSeconds: WARMUP,
  turns: hashes.length,
  samples: samples.length,
  trapped,
  drift,
  ledger: { baseline: base, afterClose, afterEngine },
  replayIdentical: firstDiff < 0,
  failures,
};
if (values.json === true) console.log(JSON.stringify(report, null, 2));
else {
  console.log(`soak: ${hashes.length} turns in ${seconds} s (warm-up ${WARMUP} s, ${samples.length} samples)`);
  console.log(`  constructor calls after readiness: ${JSON.stringify(trapped)}`);
  console.log(`  drift after warm-up: heap ${drift.heap} B, RSS ${drift.rss} B, workers ${JSON.stringify(drift.workers)}`);
  console.log(`  ledger: baseline ${base}, after closing the conversations ${afterClose}, after closing the engine ${afterEngine}`);
  console.log(`  replay without the harness: ${firstDiff < 0 ? 'identical bytes' : `differs at turn ${firstDiff}`}`);
}
console.log(failures.length === 0 ? 'soak: ok' : `soak: FAILED — ${failures.join('; ')}`);
process.exit(failures.length === 0 ? 0 : 1);
