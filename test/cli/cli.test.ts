import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { scratchDir } from '../helpers.js';
import { planIntervals } from '../../src/cli/plan.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000 });

t.test('bench memory --json prints one JSON document', async (t) => {
  const r = voxslab('bench', 'memory', '--json', '--quick');
  t.equal(r.status, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { bench: string; oneThread: { commitCycleNs: number }; snapshots: { owners: number }[] };
  t.equal(doc.bench, 'memory');
  t.ok(doc.oneThread.commitCycleNs > 0);
  t.same(
    doc.snapshots.map((s) => s.owners),
    [1, 4, 16, 64],
  );
});

t.test('usage errors exit 2 with a message', async (t) => {
  for (const args of [
    ['frobnicate'],
    ['bench'],
    ['bench', 'nope'],
    ['bench', 'memory', '--bogus'],
    ['bench', 'model', '--peer-bench', '/nonexistent/llama-bench'],
    ['bench', 'pipeline', '--peer'],
    [],
  ]) {
    const r = voxslab(...args);
    t.equal(r.status, 2, `voxslab ${args.join(' ')} exits 2`);
    t.ok(r.stderr.length > 0 || r.stdout.includes('usage'), 'and says why');
  }
  const ok = voxslab('help');
  t.equal(ok.status, 0);
  t.match(ok.stdout, /bench <memory\|planner\|dsp\|kernels\|model\|pipeline\|duplex\|devices\|serve>/);
  t.match(voxslab('version').stdout, /^\d+\.\d+\.\d+\n$/);
});

t.test('a bad VOXSLAB_MEMORY_LIMIT is bad input (exit 4)', async (t) => {
  const r = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
    import { MemoryDomain, exitCodeOf } from ${JSON.stringify(new URL('../../src/memory/index.js', import.meta.url).href)};
    try { MemoryDomain.create(); } catch (e) { console.error(e.message); process.exit(exitCodeOf(e)); }`,
    ],
    {
      encoding: 'utf8',
      env: { ...process.env, VOXSLAB_MEMORY_LIMIT: 'plenty' },
    },
  );
  t.equal(r.status, 4);
  t.match(r.stderr, /VOXSLAB_MEMORY_LIMIT.*'plenty' is not a size/);
});

t.test('plan --config prints a manifest; bad options and inputs exit 2 / 4', async (t) => {
  const r = voxslab('plan', '--config', 'lfm2-audio-1.5b', '--json', '--conversations', '2', '--kv', 'f16');
  t.equal(r.status, 0, r.stderr);
  const m = JSON.parse(r.stdout) as {
    schema: string;
    configuration: { conversations: number; kv: string };
    owners: Record<string, { categories: Record<string, unknown> }>;
  };
  t.equal(m.schema, 'voxslab.memory/v1');
  t.match(m.configuration, { conversations: 2, kv: 'f16' });
  t.ok('conversation/1' in m.owners && 'session/1' in m.owners);
  t.ok('weights' in m.owners['model/0']!.categories, 'the weights image is in the plan');
  const human = voxslab('plan', '--config', 'tiny');
  t.equal(human.status, 0);
  t.match(human.stdout, /conformer high-water by tiling[\s\S]*untiled[\s\S]*attention \+ subsampling tiled[\s\S]*all tiled \(default\)/);
  t.match(human.stdout, /nothing was allocated/);
  t.equal(voxslab('plan', '--config', 'tiny', '--context', 'lots').status, 2);
  t.equal(voxslab('plan', '--config', 'tiny', '--context', '99999').status, 2);
  t.equal(voxslab('plan').status, 2);
  t.equal(voxslab('plan', '--config', 'tiny', '--intervals', 'x.csv').status, 2);
  const missing = voxslab('plan', '--config', '/nonexistent/config.json');
  t.equal(missing.status, 4);
  t.match(missing.stderr, /nonexistent\/config\.json: no such file/);
});

t.test('plan --intervals plans a CSV and refuses malformed rows with the line number', async (t) => {
  const { writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const dir = scratchDir('voxslab-csv-');
  const good = join(dir, 'good.csv');
  const rows = [
    [0, 2, 32],
    [1, 5, 28],
    [2, 6, 36],
    [3, 6, 16],
    [4, 6, 8],
    [5, 8, 64],
    [6, 9, 10],
    [7, 9, 40],
  ];
  writeFileSync(good, `id,lower,upper,size\n${rows.map((r, i) => `t${i},${r.join(',')}`).join('\n')}\n`);
  const r = voxslab('plan', '--intervals', good, '--json');
  t.equal(r.status, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { highWater: number; lowerBound: number; offsets: Record<string, number> };
  t.equal(doc.highWater, 124);
  t.equal(doc.lowerBound, 124);
  t.same(Object.keys(doc.offsets).length, 8);
  t.match(voxslab('plan', '--intervals', good).stdout, /high-water\s+124 bytes/);
  t.equal(JSON.parse(voxslab('plan', '--intervals', good, '--align', '64', '--json').stdout).highWater % 64, 0);
  const bad: [string, RegExp][] = [
    ['id,lower,upper\na,0,1', /line 1: header must be 'id,lower,upper,size'/],
    ['id,lower,upper,size\na,0,1,8\nb,0,x,8', /line 3 column upper: 'x' is not a non-negative integer/],
    ['id,lower,upper,size\na,0,1,8\na,1,2,8', /line 3 column id: duplicate id 'a' \(first on line 2\)/],
    ['id,lower,upper,size\na,3,3,8', /line 2 column upper: upper 3 must be greater than lower 3/],
    ['id,lower,upper,size\na,0,1,-8', /line 2 column size/],
    ['id,lower,upper,size\na,0,1', /line 2: expected 4 columns, got 3/],
    ['id,lower,upper,size\n', /no buffers after the header/],
  ];
  // Each malformed file through the command's own function; the first through the process too.
  for (const [i, [text, pattern]] of bad.entries()) {
    const f = join(dir, `bad${i}.csv`);
    writeFileSync(f, text);
    t.throws(() => planIntervals(f, undefined, false), { name: 'BadInputError', message: pattern }, `bad${i} is bad input`);
    if (i > 0) continue;
    const b = voxslab('plan', '--intervals', f);
    t.equal(b.status, 4, `bad${i} exits 4`);
    t.match(b.stderr, pattern);
  }
  t.equal(voxslab('plan', '--intervals', good, '--align', '3').status, 2);
});

t.test('make-checkpoint writes the layout; bad options exit 2', async (t) => {
  const { existsSync } = await import('node:fs');
  const { join } = await import('node:path');
  const out = join(scratchDir('voxslab-mk-'), 'tiny');
  const r = voxslab('make-checkpoint', '--config', 'tiny', '--seed', '1', '--out', out);
  t.equal(r.status, 0, r.stderr);
  for (const f of ['config.json', 'model.safetensors', 'audio_detokenizer/config.json', 'audio_detokenizer/model.safetensors'])
    t.ok(existsSync(join(out, f)), f);
  const plan = voxslab('plan', '--config', out, '--json');
  t.equal(plan.status, 0, 'the written folder is a valid configuration for plan');
  t.equal(voxslab('make-checkpoint', '--config', 'huge', '--seed', '1', '--out', out).status, 2);
  t.equal(voxslab('make-checkpoint', '--config', 'tiny', '--seed', 'x', '--out', out).status, 2);
  t.equal(voxslab('make-checkpoint', '--config', 'tiny', '--seed', '1', '--out', out, '--dtype', 'f64').status, 2);
  const q = voxslab('make-checkpoint', '--config', 'tiny', '--seed', '1', '--out', `${out}-q4`, '--dtype', 'q4');
  t.equal(q.status, 0, q.stderr);
  t.match(q.stderr, /tensors quantized to q4 \(group 64\)/);
  const qq = voxslab('quantize', '--in', out, '--out', `${out}-q8`, '--bits', '8', '--group', '32');
  t.equal(qq.status, 0, qq.stderr);
  t.equal(voxslab('quantize', '--in', out, '--out', `${out}-x`, '--bits', '5').status, 2);
  t.equal(voxslab('quantize', '--in', out, '--out', `${out}-x`, '--bits', '8', '--group', '48').status, 2);
  t.equal(voxslab('quantize', '--in', `${out}-absent`, '--out', `${out}-x`, '--bits', '8').status, 4);
});
