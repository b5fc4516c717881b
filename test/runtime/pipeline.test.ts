import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { encodeWav } from '../../src/dsp/wav.js';
import { openFileSource } from '../../src/io/files.js';
import { WavReader } from '../../src/dsp/wav.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { runCommand } from '../../src/cli/run.js';
import { defaultPinMap } from '../../src/runtime/coordinator.js';
import { PIPELINE } from '../../src/runtime/stages/index.js';
import { installConstructorTrap } from '../../src/runtime/trap.js';
import { native } from '../../src/native.js';
import { scratchDir } from '../helpers.js';

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-pipeline-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const quiet = (): void => undefined;

/** The fixture's samples (mono) and rate. */
function readFixture(): { all: Float32Array; rate: number } {
  const src = openFileSource(fixture);
  const r = new WavReader(src, 4096);
  const all = new Float32Array(r.info.frames);
  let n = 0;
  for (let k = r.readMono(all.subarray(n), 4096); k > 0; k = r.readMono(all.subarray(n), 4096)) n += k;
  src.close();
  return { all, rate: r.info.sampleRate };
}

// A second, shorter input at another rate: the first 1.2 s of the fixture, every other sample.
const shortWav = join(work, 'short.wav');
{
  const { all, rate } = readFixture();
  const take = Math.floor(1.2 * rate);
  const half = new Float32Array(Math.floor(take / 2)).map((_, i) => all[2 * i]!);
  writeFileSync(shortWav, encodeWav({ sampleRate: Math.floor(rate / 2), channels: 1, format: 'pcm16', extensible: false }, half));
}

interface Conv {
  text: string;
  textTokens: number[];
  codes: number[][];
  output: { samples: number };
  stop: string;
  audioFrames: number;
  positions: number;
  firstAudioMs: number | null;
  frameIntervalMs: { p50: number; p99: number; max: number } | null;
}
interface Stage {
  stage: string;
  slots: { count: number; maxBusy: number; overlapped: number };
  allocationsAfterReady: number;
  canary: string | null;
  records: number;
  batchedSteps: number;
  batchedRows: number;
  widestBatch: number;
  batchedTextHeads: number;
  batchedFrames: number;
  systemCopies: number;
  deferredPasses: number;
  overduePasses: number;
  cpuMs: number;
  computeCpuMs: number;
}
interface Report {
  engine?: string;
  conversations: Conv[];
  pipeline: { stages: Stage[]; placement: { stage: string; affinity: number[]; pinError: string | null; helpers: number[][] }[] };
  allocations: { afterReadinessAttempts: number; atReadiness: { beforeReadiness: number }; atEnd: { beforeReadiness: number } };
  manifest: { owners: Record<string, { held: number; sealed: boolean }>; totals: { slab: number; native: number; pinned: number; current: number } };
}
const readReport = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Report;

// The gate holds both replies until both are ready, so both pass slots are busy at once on
// any machine; results never depend on scheduling (that is the claim under test).
t.test('two conversations of different lengths at once give exactly the bytes each gives alone on one thread', async (t) => {
  const domain = MemoryDomain.create({ policy: { redZone: 64 } });
  const pa = join(work, 'pa.wav');
  const pb = join(work, 'pb.wav');
  const rep = join(work, 'pipeline.json');
  await runCommand(
    { model, inputs: [fixture, shortWav], outputs: [pa, pb], reply: '3', seed: '5', report: rep, hooks: { domain, trapAllocations: true, gateReplies: 2 } },
    quiet,
  );
  const sa = join(work, 'sa.wav');
  const sb = join(work, 'sb.wav');
  const ra = join(work, 'sa.json');
  const rb = join(work, 'sb.json');
  await runCommand({ model, inputs: [fixture], outputs: [sa], reply: '3', seed: '5', report: ra, engine: 'single' }, quiet);
  await runCommand({ model, inputs: [shortWav], outputs: [sb], reply: '3', seed: '6', report: rb, engine: 'single' }, quiet);
  const p = readReport(rep);
  const alone = [readReport(ra).conversations[0]!, readReport(rb).conversations[0]!];
  t.equal(p.engine, 'pipeline');
  for (const [i, c] of p.conversations.entries()) {
    t.same(c.textTokens, alone[i]!.textTokens, `conversation ${i}: the same text tokens (${c.textTokens.length})`);
    t.same(c.codes, alone[i]!.codes, `conversation ${i}: the same ${c.codes.length} audio frames`);
  }
  t.ok(readFileSync(pa).equals(readFileSync(sa)), 'reply A: the same WAV bytes');
  t.ok(readFileSync(pb).equals(readFileSync(sb)), 'reply B: the same WAV bytes');
  t.notOk(readFileSync(pa).equals(readFileSync(pb)), 'the two replies differ (different inputs and seeds)');
  const stage = (n: string) => p.pipeline.stages.find((s) => s.stage === n)!;
  for (const n of ['conformer', 'depthformer', 'playback']) {
    t.equal(stage(n).slots.count, 2, `${n}: two pass slots`);
  }
  const depth = stage('depthformer');
  t.ok(depth.batchedSteps > 0, `depthformer: ${depth.batchedSteps} backbone calls served both conversations at once`);
  t.ok(depth.batchedTextHeads > 0, `depthformer: ${depth.batchedTextHeads} of them ran both text heads in one call`);
  t.ok(depth.batchedFrames > 0, `depthformer: ${depth.batchedFrames} of them ran both Depthformer frames in one call`);
  t.equal(depth.systemCopies, 1, 'the second conversation copied the system prompt the first ran');
  // Replies do not hold slots: the Depthformer stage holds one while a turn is staged and for
  // its first step, playback one per record (the four-conversation test below plays more
  // replies at once than there are slots).
  for (const s of p.pipeline.stages) {
    t.equal(s.allocationsAfterReady, 0, `${s.stage}: no buffer or typed array constructed after readiness`);
    t.equal(s.canary, null, `${s.stage}: every red zone intact`);
    t.ok(s.records > 0, `${s.stage}: handled ${s.records} records`);
    t.ok(s.cpuMs >= s.computeCpuMs && s.computeCpuMs >= 0, `${s.stage}: ${s.cpuMs} ms of CPU, ${s.computeCpuMs} of it in timed compute`);
  }
  for (const n of ['conformer', 'depthformer', 'playback']) t.ok(stage(n).computeCpuMs > 0, `${n}: its compute is on its CPU clock`);
  t.equal(p.allocations.afterReadinessAttempts, 0);
  t.equal(p.allocations.atEnd.beforeReadiness, p.allocations.atReadiness.beforeReadiness, 'no slab created during the run');
  const owners = Object.values(p.manifest.owners);
  const tot = p.manifest.totals;
  t.equal(
    owners.reduce((a, o) => a + o.held, 0),
    tot.current,
    'owners add up to the process total (shared storage charged once)',
  );
  t.equal(tot.slab + tot.native + tot.pinned, tot.current, 'slabs, native holds (the mirrored capture rings) and pinned bytes make the total');
  t.ok(
    owners.every((o) => o.sealed),
    'every owner sealed',
  );
  t.ok(
    ['model/0', 'ticket/0', 'ticket/1', 'conversation/0', 'conversation/1', 'session/0', 'session/1'].every((o) => p.manifest.owners[o] !== undefined),
    'model, both tickets, both conversations and sessions charged',
  );
  t.equal(domain.snapshot().held.total, 0, 'closing the pipeline returned every byte');
});

t.test("the report has each reply's summary even when playback passes its end on first", async (t) => {
  // The hook stalls the Depthformer stage between a turn's two end records, so playback's end
  // reaches the main thread long before it could if the summary were written second.
  const runs: Conv[] = [];
  for (const turnEndPauseMs of [0, 400]) {
    const rep = join(work, `pause-${turnEndPauseMs}.json`);
    await runCommand(
      { model, inputs: [fixture], outputs: [join(work, `pause-${turnEndPauseMs}.wav`)], reply: '2', seed: '5', report: rep, hooks: { turnEndPauseMs } },
      quiet,
    );
    runs.push(readReport(rep).conversations[0]!);
  }
  const [plain, paused] = runs as [Conv, Conv];
  t.ok(plain.audioFrames > 0, `${plain.audioFrames} frames without the stall`);
  t.equal(paused.audioFrames, plain.audioFrames, 'the same frame count with it');
  t.equal(paused.stop, plain.stop, 'and the same stop');
  t.equal(paused.positions, plain.positions, 'and the same positions');
});

t.test("playback holds a reply's first frame for its second: their samples leave together", async (t) => {
  // The hook stalls the Depthformer stage for a second after each reply's first audio frame.
  const stall = 1000;
  const run = async (name: string, lookaheadMs?: number): Promise<{ conv: Conv; wav: Buffer }> => {
    const rep = join(work, `${name}.json`);
    const out = join(work, `${name}.wav`);
    const hooks = { firstFramePauseMs: stall, ...(lookaheadMs !== undefined ? { lookaheadMs } : {}) };
    await runCommand({ model, inputs: [fixture], outputs: [out], reply: '2', seed: '5', report: rep, hooks }, quiet);
    return { conv: readReport(rep).conversations[0]!, wav: readFileSync(out) };
  };
  const held = await run('preroll');
  t.ok(held.conv.audioFrames >= 2, `${held.conv.audioFrames} frames`);
  t.ok(held.conv.firstAudioMs! >= stall, `the first samples waited for the second frame, through the stall (${held.conv.firstAudioMs} ms after the input)`);
  t.ok(held.conv.frameIntervalMs!.max < stall / 2, `no gap between the reply's blocks near the stall (longest ${held.conv.frameIntervalMs!.max} ms)`);
  // The control: with a look-ahead under two frames there is no pre-roll, and the stall is a gap.
  const bare = await run('no-preroll', 80);
  t.ok(bare.conv.frameIntervalMs!.max >= 0.9 * stall, `without the pre-roll the first block leaves alone (a gap of ${bare.conv.frameIntervalMs!.max} ms)`);
  t.ok(held.wav.equals(bare.wav), 'the same WAV bytes either way');
});

t.test("a turn's prompt pass waits while a reply playing is behind its player; alone, nothing waits", async (t) => {
  // At device pace the short turn ends at 1.2 s and the long one at 2.9 s. The hook stalls the
  // Depthformer stage 2.5 s after the short reply's first frame, so that reply is far behind a
  // player that began then when the long turn's first step (its prompt's last rows) is due.
  const run = async (name: string, inputs: string[]): Promise<Stage> => {
    const rep = join(work, `${name}.json`);
    const outputs = inputs.map((_, i) => join(work, `${name}${i}.wav`));
    await runCommand({ model, inputs, outputs, reply: '2', seed: '5', report: rep, realtime: true, hooks: { firstFramePauseMs: 2500 } }, quiet);
    return readReport(rep).pipeline.stages.find((s) => s.stage === 'depthformer')!;
  };
  const two = await run('defer', [shortWav, fixture]);
  t.ok(
    two.deferredPasses >= 1,
    `the long turn's first step waited for the short reply's lead (${two.deferredPasses} waits, ${two.overduePasses} past the longest wait)`,
  );
  // The control: with no other reply playing the same turn never waits.
  const one = await run('defer-alone', [fixture]);
  t.equal(one.deferredPasses, 0, 'alone, no pass waits');
});

// Four replies at once on the default two pass slots: a reply holds a slot only for its turn's
// prefill and first step; every later step joins one batched call of all the replies ready.
t.test('four conversations of different lengths at once: one batched step serves all four, and each gives the bytes it gives alone', async (t) => {
  const inputs = [fixture, shortWav, join(work, 'cut1.wav'), join(work, 'cut2.wav')];
  const { all, rate } = readFixture();
  for (const [i, seconds] of [0.7, 2].entries()) {
    const cut = all.subarray(0, Math.floor(seconds * rate));
    writeFileSync(inputs[2 + i]!, encodeWav({ sampleRate: rate, channels: 1, format: 'pcm16', extensible: false }, cut));
  }
  const outs = inputs.map((_, i) => join(work, `four${i}.wav`));
  const rep = join(work, 'four.json');
  await runCommand({ model, inputs, outputs: outs, reply: '3', seed: '11', report: rep, hooks: { trapAllocations: true, gateReplies: 4 } }, quiet);
  const p = readReport(rep);
  for (const [i, input] of inputs.entries()) {
    const solo = join(work, `four-solo${i}.wav`);
    const sr = join(work, `four-solo${i}.json`);
    await runCommand({ model, inputs: [input], outputs: [solo], reply: '3', seed: String(11 + i), report: sr, engine: 'single' }, quiet);
    const alone = readReport(sr).conversations[0]!;
    t.same(p.conversations[i]!.codes, alone.codes, `conversation ${i}: the same ${alone.codes.length} audio frames as alone`);
    t.ok(readFileSync(outs[i]!).equals(readFileSync(solo)), `conversation ${i}: the same WAV bytes as alone`);
  }
  t.equal(new Set(outs.map((o) => readFileSync(o).toString('base64'))).size, 4, 'the four replies differ (the comparison can fail)');
  const depth = p.pipeline.stages.find((s) => s.stage === 'depthformer')!;
  t.equal(depth.slots.count, 2, 'two pass slots');
  t.equal(depth.widestBatch, 4, `one batched call served all four (${depth.batchedSteps} batched calls, ${depth.batchedRows} positions)`);
  t.ok(depth.batchedFrames > 0, `${depth.batchedFrames} batched calls ran several Depthformer frames in one call`);
  const play = p.pipeline.stages.find((s) => s.stage === 'playback')!;
  t.equal(play.widestBatch, 4, `one detokenizer call served all four (${play.batchedSteps} batched calls, ${play.batchedRows} frames)`);
  for (const s of p.pipeline.stages) t.equal(s.allocationsAfterReady, 0, `${s.stage}: nothing constructed after readiness`);
});

t.test('each worker runs where the pin map puts it', async (t) => {
  if (!native.affinitySupported()) {
    t.pass('skipped: this OS has no thread affinity call');
    return;
  }
  const rep = join(work, 'pin.json');
  await runCommand({ model, inputs: [shortWav], outputs: [join(work, 'pin.wav')], reply: '1', report: rep }, quiet);
  const want = defaultPinMap(native.allowedCpus());
  for (const w of readReport(rep).pipeline.placement) {
    t.equal(w.pinError, null, `${w.stage}: pinned`);
    t.same(w.affinity, want[w.stage as keyof typeof want], `${w.stage}: affinity ${w.affinity.join('+')}`);
  }
  await runCommand({ model, inputs: [shortWav], outputs: [join(work, 'nopin.wav')], reply: '1', report: rep, pin: 'none' }, quiet);
  const all = native.allowedCpus();
  t.ok(
    readReport(rep).pipeline.placement.every((w) => w.affinity.length === all.length),
    '--pin none leaves every CPU allowed',
  );
});

t.test('a stage worker that dies mid-pass ends the run with a typed error; every byte comes back; the next run works', async (t) => {
  const domain = MemoryDomain.create();
  await t.rejects(
    runCommand(
      {
        model,
        inputs: [fixture, shortWav],
        outputs: [join(work, 'k1.wav'), join(work, 'k2.wav')],
        reply: '3',
        hooks: { domain, exitAfterRecords: { depthformer: 25 } },
      },
      quiet,
    ),
    { name: 'WorkerError', code: 'ERR_VOXSLAB_WORKER', stage: 'depthformer' },
  );
  const s = domain.snapshot();
  t.equal(s.held.total, 0, 'held bytes back to 0 (the dead worker’s slabs returned by the coordinator)');
  t.equal(s.reserved, 0, 'nothing left reserved');
  const out = join(work, 'after.wav');
  const text = await runCommand({ model, inputs: [shortWav], outputs: [out], reply: '1', hooks: { domain } }, quiet);
  t.match(text, /short\.wav → /, 'a new conversation runs in the same process and domain');
  t.equal(domain.snapshot().held.total, 0);
});

t.test('the constructor trap counts constructions and nothing else (the zero-allocation probe can fail)', async (t) => {
  const trap = installConstructorTrap();
  try {
    const a = new Float32Array(8);
    const view = a.subarray(2, 4);
    const sab = new SharedArrayBuffer(16);
    t.ok(view.length === 2 && sab.byteLength === 16);
    t.equal(trap.count, 2, 'two constructions counted, the view is not');
    t.ok(new Float32Array(2) instanceof Float32Array, 'instances still pass instanceof');
  } finally {
    trap.uninstall();
  }
  t.equal(globalThis.Float32Array.name, 'Float32Array');
});

t.test('small (planes past the sizing run’s view limit): the pipeline equals one thread, byte for byte', async (t) => {
  const small = join(work, 'small');
  makeCheckpoint({ config: 'small', seed: 4, out: small, dtype: 'f32' });
  const p = join(work, 'small-p.wav');
  const s = join(work, 'small-s.wav');
  await runCommand({ model: small, inputs: [shortWav], outputs: [p], reply: '1' }, quiet);
  await runCommand({ model: small, inputs: [shortWav], outputs: [s], reply: '1', engine: 'single' }, quiet);
  t.ok(readFileSync(p).length > 1000 && readFileSync(p).equals(readFileSync(s)), 'the same WAV bytes');
});

t.test('outputs: an output that is an input is refused before anything is written; a failed run leaves no partial reply', async (t) => {
  const copy = join(work, 'copy.wav');
  writeFileSync(copy, readFileSync(shortWav));
  await t.rejects(runCommand({ model, inputs: [copy], outputs: [copy], reply: '1' }, quiet), {
    name: 'UsageError',
    message: /--out '.*copy\.wav' is also --in '.*copy\.wav'/,
  });
  t.ok(readFileSync(copy).equals(readFileSync(shortWav)), 'the input is untouched');
  const out = join(work, 'never.wav');
  await t.rejects(runCommand({ model, inputs: [shortWav], outputs: [out], reply: '3', hooks: { exitAfterRecords: { playback: 10 } } }, quiet), {
    name: 'WorkerError',
  });
  const { readdirSync } = await import('node:fs');
  t.notOk(
    readdirSync(work).some((f) => f.includes('never.wav')),
    'no reply file and no partial file left',
  );
});

t.test('--threads 2: each heavy stage computes with helpers of its own, pinned with it, and the bytes do not change', async (t) => {
  const a = join(work, 'th1.wav');
  const b = join(work, 'th2.wav');
  const r1 = join(work, 'th1.json');
  const r2 = join(work, 'th2.json');
  await runCommand({ model, inputs: [fixture, shortWav], outputs: [a, join(work, 'th1b.wav')], reply: '2', threads: '1', report: r1 }, quiet);
  await runCommand({ model, inputs: [fixture, shortWav], outputs: [b, join(work, 'th2b.wav')], reply: '2', threads: '2', report: r2 }, quiet);
  t.ok(
    readReport(r1).pipeline.placement.every((w) => w.helpers.length === 0),
    'one thread per stage: no helpers',
  );
  for (const w of readReport(r2).pipeline.placement) {
    const heavy = ['conformer', 'depthformer'].includes(w.stage);
    t.equal(w.helpers.length, heavy ? 1 : 0, `${w.stage}: ${heavy ? 'one helper of its own' : 'no helpers (a light stage computes on its own thread)'}`);
    if (heavy && native.affinitySupported()) {
      t.same(w.helpers[0], w.affinity, `${w.stage}: its helper runs where the stage is pinned (${w.affinity.join('+')})`);
      t.same(w.affinity, native.allowedCpus(), `${w.stage}: with two threads the default placement allows every CPU, not only the stage's own`);
    }
  }
  t.ok(readFileSync(a).equals(readFileSync(b)), 'conversation A: the same WAV bytes with 1 and 2 threads per stage');
  t.ok(readFileSync(join(work, 'th1b.wav')).equals(readFileSync(join(work, 'th2b.wav'))), 'conversation B: the same WAV bytes');
  // --stage-threads: the Depthformer stage alone computes on two threads.
  const c = join(work, 'th3.wav');
  const r3 = join(work, 'th3.json');
  await runCommand(
    { model, inputs: [fixture, shortWav], outputs: [c, join(work, 'th3b.wav')], reply: '2', threads: '1', stageThreads: 'depthformer=2', report: r3 },
    quiet,
  );
  const want = defaultPinMap(native.allowedCpus(), PIPELINE.threads(1));
  for (const w of readReport(r3).pipeline.placement) {
    t.equal(
      w.helpers.length,
      w.stage === 'depthformer' ? 1 : 0,
      `--stage-threads depthformer=2: ${w.stage} has ${w.stage === 'depthformer' ? 'one helper' : 'none'}`,
    );
    if (native.affinitySupported())
      t.same(w.affinity, w.stage === 'depthformer' ? native.allowedCpus() : want[w.stage as keyof typeof want], `${w.stage}: affinity ${w.affinity.join('+')}`);
  }
  t.ok(readFileSync(a).equals(readFileSync(c)), 'conversation A: the same WAV bytes with the Depthformer stage on two threads');
  for (const bad of ['depthformer=9', 'gpu=2', 'depthformer', 'depthformer=0']) {
    await t.rejects(
      runCommand({ model, inputs: [shortWav], outputs: [join(work, 'never.wav')], stageThreads: bad }, quiet),
      { name: 'UsageError' },
      `--stage-threads ${bad} is refused`,
    );
  }
});
