// Each row of the reliability issue's table through the real command: a fault in a stage worker,
// a C++ exception at the addon's edge, an address-space limit, output paths, configurations
// whose derived sizes are absurd, JSON too big to parse. Each failed before its fix (a trace,
// an abort, exit 1, or a temporary name in the message).
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { load, MemoryLimitError } from '../../src/index.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-failures-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 1, out: model, dtype: 'f32' });
const env = { ...process.env, VOXSLAB_CACHE: join(work, 'cache') };
// The test runner's module hooks stay out of the limited processes: they reserve address space of their own.
const bare = Object.fromEntries(Object.entries(env).filter(([k]) => k !== 'NODE_OPTIONS'));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000, cwd: work, env });
/** The command under shell limits (`ulimit` flags such as `-v 4194304`: a 4 GiB address space). */
const limited = (limits: string, extra: Record<string, string>, ...args: string[]) =>
  spawnSync('bash', ['-c', `ulimit ${limits} && exec "$0" "$@"`, process.execPath, cli, ...args], {
    encoding: 'utf8',
    timeout: 180_000,
    cwd: work,
    env: { ...bare, ...extra },
  });

/** `run` on the test model and the fixture, its reply to `out` in the work folder. */
const runArgs = (out: string, ...extra: string[]): string[] => ['run', '--model', model, '--in', fixture, '--out', join(work, out), ...extra];

/** Exit code and one clean line: no stack trace, no internal fault, no abort. */
function refused(t: Test, r: { status: number | null; stderr: string }, code: number, message: RegExp): void {
  t.equal(r.status, code, `exit ${code}: ${r.stderr.trim().slice(0, 300)}`);
  t.match(r.stderr, message);
  t.notMatch(r.stderr, /internal fault|\n\s+at |terminate called|FATAL ERROR/, 'no stack trace');
  t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
}

/** Names in `dir` that a failed write would leave behind. */
const leftovers = (dir: string): string[] => readdirSync(dir).filter((f) => f.includes('.partial'));

t.test('a cap refusal inside a stage worker is the memory-limit error: exit 3, one line; the library rejects with its class', async (t) => {
  const r = limited('-v unlimited', { VOXSLAB_MEMORY_LIMIT: '20MiB' }, 'run', '--model', model, '--in', fixture, '--out', join(work, 'cap.wav'));
  // The weights fit; a stage's own slab (named for its stage) does not.
  refused(
    t,
    r,
    3,
    /^voxslab: memory limit refused \d+ bytes for owner '[a-z]+\/\d+' \(slab '[a-z ]+\d* (capture|frontend|conformer|depthformer|playback)'\): \d+ bytes in use/,
  );
  t.notOk(existsSync(join(work, 'cap.wav')), 'no output');
  t.same(leftovers(work), [], 'no temporary file left');
  const e = await load(model, { memoryLimit: '20MiB' }).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(e instanceof MemoryLimitError, `load rejects with MemoryLimitError (${String(e)})`);
  t.match(e, { code: 'ERR_VOXSLAB_MEMORY_LIMIT', exitCode: 3, limit: 20 * 2 ** 20 }, 'its fields crossed the thread');
});

t.test('helper threads the system will not start leave a smaller pool, said so; nothing aborts', async (t) => {
  // 400 MB stacks in a 4 GiB address space the process already half fills: three helpers cannot all start.
  const single = limited('-v 4194304 -s 400000', {}, ...runArgs('th1.wav', '--threads', '4', '--reply', '1', '--engine', 'single'));
  t.equal(single.status, 0, single.stderr.slice(0, 400));
  t.notMatch(single.stderr, /terminate called|FATAL ERROR/);
  t.match(single.stderr, /--threads: [123] of 4 compute threads started \(the system refused more\)/, 'the run says how many it has');
  // The issue's command: eight threads a stage in a 4 GiB address space (the stages' isolates reserve little).
  const r = limited('-v 4194304', { VOXSLAB_MEMORY_LIMIT: '1GiB' }, ...runArgs('th.wav', '--segment', '600', '--threads', '8', '--reply', '1'));
  t.equal(r.status, 0, r.stderr.slice(0, 400));
  t.notMatch(r.stderr, /terminate called|FATAL ERROR/);
});

t.test('output paths: the path the user gave, exit 4, nothing left behind', async (t) => {
  const file = join(work, 'a-file');
  writeFileSync(file, 'x');
  refused(
    t,
    voxslab('run', '--model', model, '--in', fixture, '--out', join(work, 'd.wav'), '--dump', file),
    4,
    /a-file, field --dump: exists and is not a folder/,
  );
  refused(t, voxslab('make-checkpoint', '--config', 'tiny', '--seed', '1', '--out', file), 4, /a-file, field --out: exists and is not a folder/);
  // The dump folder where the reply goes: refused before anything is written (it was left behind).
  refused(t, voxslab(...runArgs('same', '--dump', join(work, 'same'), '--engine', 'single')), 2, /--dump '.*same' is also --out/);
  t.notOk(existsSync(join(work, 'same')), 'neither the reply nor the dump is written');
  refused(t, voxslab('make-checkpoint', '--config', 'tiny', '--seed', '1', '--out', join(file, 'sub')), 4, /a-file\/sub, field --out: .*not a folder/);
  const long = join(work, `${'a'.repeat(300)}.wav`);
  refused(
    t,
    voxslab('resample', '--in', fixture, '--rate', '8000', '--out', long),
    4,
    /field --out: the name 'a{24}…' is too long \(304 bytes; the limit is 255\)/,
  );
  refused(t, voxslab('run', '--model', model, '--in', fixture, '--out', join(work, 'r.wav'), '--report', long), 4, /field --report: the name .* is too long/);
  // A name that fits, whose temporary name would not: written all the same.
  const fits = join(work, `${'b'.repeat(250)}.wav`);
  t.equal(voxslab('resample', '--in', fixture, '--rate', '8000', '--out', fits).status, 0, 'a 254-byte name is written');
  refused(
    t,
    voxslab('run', '--model', model, '--in', fixture, '--out', '/proc/version'),
    4,
    /^voxslab: \/proc\/version, field --out: cannot write it: .*\(ENOENT\)$/m,
  );
  refused(t, voxslab('mel', '--in', fixture, '--out', '/proc/version'), 4, /^voxslab: \/proc\/version, field --out: cannot write it/m);
  const cache = spawnSync(process.execPath, [cli, 'plan', '--config', 'tiny'], { encoding: 'utf8', env: { ...env, VOXSLAB_CACHE: '/proc/x' } });
  t.equal(cache.status, 0, 'plan needs no cache');
  const run = spawnSync(process.execPath, [cli, 'run', '--model', 'tiny', '--in', fixture, '--out', join(work, 'c.wav')], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...env, VOXSLAB_CACHE: '/proc/x' },
  });
  refused(t, run, 4, /\/proc\/x, field VOXSLAB_CACHE: cannot make the built-in 'tiny' checkpoint there \(cannot write it: .*\(ENOENT\)\)/);
  t.same(leftovers(work), [], 'no temporary file left');
  t.notOk(existsSync(join(work, 'd.wav')), 'no output of the refused run');
});

t.test('configurations: derived sizes and oversized JSON are bad input naming the file and field', async (t) => {
  const variant = (name: string, edit: (c: Record<string, any>) => void): string => {
    const dir = join(work, name);
    cpSync(model, dir, { recursive: true });
    const f = join(dir, 'config.json');
    const c = JSON.parse(readFileSync(f, 'utf8')) as Record<string, any>;
    edit(c);
    writeFileSync(f, JSON.stringify(c));
    return dir;
  };
  const hop = variant('hop', (c) => {
    c.preprocessor.window_stride = 1e-9;
  });
  for (const args of [
    ['plan', '--config', hop],
    ['run', '--model', hop, '--in', fixture, '--out', join(work, 'h.wav')],
  ]) {
    refused(t, voxslab(...args), 4, /hop\/config\.json, field preprocessor\.window_stride: a hop of 0 samples/);
  }
  const ffn = variant('ffn', (c) => {
    c.lfm.block_ffn_dim_multiplier = 1e9;
  });
  refused(t, voxslab('plan', '--config', ffn), 4, /ffn\/config\.json, field lfm\.block_ffn_dim_multiplier: gives an FFN width/);
  const vocab = variant('vocab', (c) => {
    Object.assign(c.lfm, { vocab_size: 1048576, hidden_size: 16384, num_attention_heads: 128, num_key_value_heads: 128 });
  });
  refused(
    t,
    voxslab('plan', '--config', join(vocab, 'config.json')),
    4,
    /vocab\/config\.json, field tensor 'lfm\.embed_tokens\.weight': shape \[1048576, 16384\] needs 68719476736 bytes, more than the largest slab/,
  );
  const heads = variant('heads', (c) => {
    c.lfm.num_attention_heads = 64;
  });
  refused(t, voxslab('run', '--model', heads, '--in', fixture, '--out', join(work, 'h.wav')), 4, /field lfm\.num_attention_heads: gives heads of 1 values/);
  // A 50 MB string and a million-deep array: refused by their size and shape, not by the heap.
  const big = variant('big', (c) => {
    c.junk = 'x'.repeat(50_000_000);
  });
  refused(
    t,
    limited('-v 4194304', {}, 'run', '--model', big, '--in', fixture, '--out', join(work, 'b.wav')),
    4,
    /big\/config\.json: the configuration is \d+ bytes; the limit is 1048576/,
  );
  const deep = join(work, 'deep');
  cpSync(model, deep, { recursive: true });
  const text = readFileSync(join(deep, 'config.json'), 'utf8').trimEnd();
  writeFileSync(join(deep, 'config.json'), `${text.slice(0, -1)}, "junk": ${'['.repeat(400_000)}${']'.repeat(400_000)}}`);
  refused(t, voxslab('plan', '--config', deep), 4, /deep\/config\.json, offset \d+: nested deeper than 16 levels/);
});
