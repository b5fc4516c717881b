import t from 'tap';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, rmSync, truncateSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { encodeWav } from '../../src/dsp/wav.js';
import { BUILTIN_CONFIGS } from '../../src/model/format/config.js';
import { SYNTH_VERSION } from '../../src/model/format/synth.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-run-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 2, out: model, dtype: 'f32' });
const voxslab = (...args: string[]) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, VOXSLAB_CACHE: join(work, 'cache') } });

interface Report {
  schema: string;
  conversations: {
    text: string;
    textTokens: number[];
    codes: number[][];
    audioFrames: number;
    output: { samples: number; sampleRate: number };
    timings: Record<string, { ms: number; count: number }>;
    stop: string;
  }[];
  allocations: {
    atReadiness: { beforeReadiness: number };
    atEnd: { beforeReadiness: number; afterReadiness: { attempts: number } };
    afterReadinessAttempts: number;
  };
  manifest: {
    plans: Record<string, { highWater: number; carved: number }>;
    owners: Record<string, { held: number; sealed: boolean; categories: Record<string, { footprint: number }> }>;
    totals: { slab: number; native: number; pinned: number; current: number };
  };
}

t.test('run answers a spoken question: reply WAV, text on stdout, a report with manifest, timings and codes', async (t) => {
  const out = join(work, 'reply.wav');
  const rep = join(work, 'report.json');
  const r = voxslab('run', '--model', model, '--in', fixture, '--out', out, '--report', rep, '--reply', '3', '--rate', '44100');
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /hello\.wav → .*reply\.wav: "/);
  const report = JSON.parse(readFileSync(rep, 'utf8')) as Report;
  t.equal(report.schema, 'voxslab.run/v1');
  const c = report.conversations[0]!;
  t.ok(c.audioFrames > 0 && c.codes.length === c.audioFrames, `${c.audioFrames} frames of 8 codes recorded`);
  t.ok(c.codes.every((f) => f.length === 8 && f.every((x) => Number.isInteger(x) && x >= 0 && x <= 2048)));
  t.equal(c.output.sampleRate, 44100);
  // Float32 mono WAV: an 18-byte fmt chunk, 46-byte header.
  t.equal(statSync(out).size, 46 + 4 * c.output.samples, 'the WAV holds every reported sample');
  t.ok(c.output.samples > 0.5 * 44100, `${c.output.samples} samples at 44.1 kHz`);
  for (const s of ['frontend', 'encoder', 'prefill', 'audioStep', 'depthformer', 'detokenizer'])
    t.ok(c.timings[s]!.count > 0 && c.timings[s]!.ms >= 0, `timed: ${s}`);
  t.equal(report.allocations.afterReadinessAttempts, 0, 'zero allocation attempts after readiness');
  t.equal(report.allocations.atEnd.beforeReadiness, report.allocations.atReadiness.beforeReadiness, 'no allocation at all during the run');
  for (const [name, p] of Object.entries(report.manifest.plans)) t.equal(p.carved, p.highWater, `${name}: carved = planned high-water (${p.highWater} B)`);
  const owners = Object.values(report.manifest.owners);
  const tot = report.manifest.totals;
  t.equal(
    owners.reduce((a, o) => a + o.held, 0),
    tot.current,
    'owners add up to the process total',
  );
  t.equal(tot.slab + tot.native + tot.pinned, tot.current, 'slabs, native holds (the mirrored capture ring) and pinned bytes make the total');
  t.ok(
    owners.every((o) => o.sealed),
    'every owner is sealed (ready)',
  );
  // Arenas are sized by a dry run: the only uncarved bytes are the slab's rounding to whole pages.
  for (const name of ['ticket/0', 'conversation/0']) {
    const slack = report.manifest.owners[name]!.categories.slack?.footprint ?? 0;
    t.ok(slack < 65536, `${name}: ${slack} B of slack (page rounding only)`);
  }
});

t.test('same seed → same reply bytes; another seed differs; --dump writes every stage', async (t) => {
  const a = join(work, 'a.wav');
  const b = join(work, 'b.wav');
  const c = join(work, 'c.wav');
  const dump = join(work, 'dump');
  t.equal(voxslab('run', '--model', model, '--in', fixture, '--out', a, '--seed', '4', '--reply', '2', '--dump', dump).status, 0);
  t.equal(voxslab('run', '--model', model, '--in', fixture, '--out', b, '--seed', '4', '--reply', '2').status, 0);
  t.equal(voxslab('run', '--model', model, '--in', fixture, '--out', c, '--seed', '5', '--reply', '2').status, 0);
  t.ok(readFileSync(a).equals(readFileSync(b)), 'seed 4 twice: identical bytes');
  t.notOk(readFileSync(a).equals(readFileSync(c)), 'seed 5: other bytes');
  const index = JSON.parse(readFileSync(join(dump, 'index.json'), 'utf8')) as { files: { file: string; shape: number[]; dtype: string }[] };
  const names = index.files.map((f) => f.file).sort();
  t.same(names, [
    'c0_adapter.npy',
    'c0_audio_logits.npy',
    'c0_bins.npy',
    'c0_codes.npy',
    'c0_encoder.npy',
    'c0_hidden.npy',
    'c0_mel.npy',
    'c0_pcm.npy',
    'c0_text_logits.npy',
    'c0_text_tokens.npy',
  ]);
  for (const f of index.files) {
    const bytes = readFileSync(join(dump, f.file));
    t.equal(bytes.subarray(1, 6).toString('latin1'), 'NUMPY', `${f.file} is .npy`);
    const headerLen = bytes.readUInt16LE(8);
    t.equal(bytes.length - 10 - headerLen, f.shape.reduce((x, y) => x * y, 1) * 4, `${f.file}: [${f.shape.join(', ')}] ${f.dtype}`);
  }
  const pcm = index.files.find((f) => f.file === 'c0_pcm.npy')!;
  t.equal(pcm.shape[0], (readFileSync(a).length - 46) / 4, 'the dumped PCM is the reply');
});

t.test('two inputs, two conversations, each with its own state', async (t) => {
  const rep = join(work, 'two.json');
  const r = voxslab(
    'run',
    '--model',
    model,
    '--in',
    fixture,
    '--out',
    join(work, 'x.wav'),
    '--in',
    fixture,
    '--out',
    join(work, 'y.wav'),
    '--reply',
    '1',
    '--report',
    rep,
  );
  t.equal(r.status, 0, r.stderr);
  const report = JSON.parse(readFileSync(rep, 'utf8')) as Report;
  t.equal(report.conversations.length, 2);
  t.ok(report.manifest.owners['conversation/1'], 'a second conversation owner');
  t.equal(r.stdout.trim().split('\n').length, 2, 'one text line per conversation');
});

t.test('a built-in name is generated on first use', async (t) => {
  const r = voxslab('run', '--model', 'tiny', '--in', fixture, '--out', join(work, 'builtin.wav'), '--reply', '1');
  t.equal(r.status, 0, r.stderr);
  t.match(r.stderr, /generating the 'tiny' checkpoint/);
  t.ok(existsSync(join(work, 'cache', `tiny-seed1-f32-v${SYNTH_VERSION}`, 'tokenizer.json')));
  const again = voxslab('run', '--model', 'tiny', '--in', fixture, '--out', join(work, 'builtin.wav'), '--reply', '1');
  t.equal(again.status, 0);
  t.notMatch(again.stderr, /generating/, 'and reused after');
});

t.test('bad checkpoints and bad WAVs exit 4 naming the file and the reason', async (t) => {
  const copy = (name: string): string => {
    const d = join(work, name);
    rmSync(d, { recursive: true, force: true });
    cpSync(model, d, { recursive: true });
    return d;
  };
  const truncated = copy('truncated');
  const st = join(truncated, 'model.safetensors');
  truncateSync(st, statSync(st).size - 1000);
  const mismatched = copy('mismatched');
  writeFileSync(join(mismatched, 'config.json'), JSON.stringify(BUILTIN_CONFIGS.small![0]));
  const missing = copy('missing');
  const ms = join(missing, 'model.safetensors');
  const bytes = readFileSync(ms);
  const at = bytes.indexOf('lfm.embedding_norm.weight');
  bytes.write('lfm.embedding_norm.weighX', at, 'latin1');
  writeFileSync(ms, bytes);
  const noTokenizer = copy('no-tokenizer');
  rmSync(join(noTokenizer, 'tokenizer.json'));
  const garbage = join(work, 'garbage.wav');
  writeFileSync(garbage, Buffer.from('RIFF\x10\x00\x00\x00WAVEjunkjunkjunk', 'latin1'));
  const nan = join(work, 'nan.wav');
  const samples = new Float32Array(1600).fill(0.1);
  samples[800] = Number.NaN;
  writeFileSync(nan, encodeWav({ sampleRate: 16000, channels: 1, format: 'float32', extensible: false }, samples));
  const long = join(work, 'long.wav');
  writeFileSync(long, encodeWav({ sampleRate: 8000, channels: 1, format: 'pcm16', extensible: false }, new Float32Array(8000 * 3)));
  const cases: [string, string[], RegExp][] = [
    ['truncated checkpoint', ['--model', truncated, '--in', fixture], /model\.safetensors/],
    ['config of another shape', ['--model', mismatched, '--in', fixture], /model\.safetensors.*(shape|missing)/],
    ['missing tensor', ['--model', missing, '--in', fixture], /tensor 'lfm\.embedding_norm\.weight'.*missing/],
    ['no tokenizer', ['--model', noTokenizer, '--in', fixture], /tokenizer\.json.*no tokenizer\.json/],
    ['no such model', ['--model', join(work, 'nowhere'), '--in', fixture], /nowhere/],
    ['malformed WAV', ['--model', model, '--in', garbage], /garbage\.wav/],
    ['NaN in the WAV', ['--model', model, '--in', nan], /nan\.wav.*NaN/],
    ['longer than a segment', ['--model', model, '--in', long, '--segment', '2'], /long\.wav.*3\.00 s of audio; the longest user segment is 2 s/],
  ];
  for (const [name, args, pattern] of cases) {
    const r = voxslab('run', ...args, '--out', join(work, 'never.wav'), '--reply', '1');
    t.equal(r.status, 4, `${name}: exit 4`);
    t.match(r.stderr, pattern, `${name}: ${r.stderr.trim().split('\n')[0]}`);
  }
  const usage: string[][] = [
    ['--model', model],
    ['--model', model, '--in', fixture],
    ['--model', model, '--in', fixture, '--out', 'x.wav', '--rate', 'fast'],
    ['--model', model, '--in', fixture, '--out', 'x.wav', '--reply', '0'],
  ];
  for (const args of usage) t.equal(voxslab('run', ...args).status, 2, `usage: run ${args.slice(2).join(' ')}`);
});

t.test('golden: the tiny reply to the fixture is pinned byte for byte (portable scalar kernels)', async (t) => {
  // The built-in tiny checkpoint (seed 1) and the scalar kernels compiled without FP contraction
  // give the same bytes on every x86 machine; both engines must produce them.
  const golden = '6fb706a10159cf132bf9e71b6c7450dd3da250b481b1de0c9a6125f7a07fad0c';
  for (const engine of ['single', 'pipeline']) {
    const out = join(work, `golden-${engine}.wav`);
    const r = spawnSync(process.execPath, [cli, 'run', '--model', 'tiny', '--in', fixture, '--out', out, '--reply', '2', '--engine', engine], {
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, VOXSLAB_CACHE: join(work, 'cache'), VOXSLAB_KERNELS: 'scalar' },
    });
    t.equal(r.status, 0, r.stderr);
    t.equal(createHash('sha256').update(readFileSync(out)).digest('hex'), golden, `${engine}: SHA-256 of the reply WAV`);
  }
});
