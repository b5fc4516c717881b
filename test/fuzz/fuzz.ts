/**
 * `npm run fuzz -- [--cases N] [--seconds S] [--workers W] [--seed X]`: mutates seed files — WAV,
 * safetensors, config.json, tokenizer files, with deep and long JSON among the mutations — and
 * command lines (flags, values, counts and lengths at their limits, output paths that exist, are
 * files, lie under a file or are too long, environment variables) and runs each case through the real CLI (`runCli`, in worker threads with a memory cap and a
 * heap limit). Every result is classified:
 *   success, refusal (exit 2, 3 or 4 with one line) — the only acceptable ones —
 *   crash (the worker died or an error escaped), hang (no answer in the case timeout),
 *   resource (the worker ran out of heap), trace (exit 1: an internal fault), exit-code (any
 *   other code), partial (a failed case left its output behind), non-finite (exit 0 with a
 *   non-finite sample in the output).
 * Bounded by count and time; exit 0 when no case falls outside the first two classes.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';

const { makeCheckpoint } = await import('../../src/io/checkpoint.js');
const { encodeWav, memorySource, readWavMono } = await import('../../src/dsp/wav.js');

const { values } = parseArgs({
  options: { cases: { type: 'string' }, seconds: { type: 'string' }, workers: { type: 'string' }, seed: { type: 'string' }, json: { type: 'boolean' } },
});
const CASES = Number(values.cases ?? 100_000);
const SECONDS = Number(values.seconds ?? 3600);
const WORKERS = Number(values.workers ?? 2);
const CASE_MS = 20_000;

/** Seeded xorshift: the same seed gives the same cases. */
let state = Number(values.seed ?? 1) >>> 0 || 1;
const rnd = (): number => {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  return (state >>> 0) / 2 ** 32;
};
const int = (n: number): number => Math.floor(rnd() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;

const root = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : '/tmp', 'voxslab-fuzz-'));
const model = join(root, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 1, out: model, dtype: 'f16' });
const hello = readFileSync(fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url)));
const wavSeeds: Uint8Array[] = [hello];
for (const format of ['pcm8', 'pcm16', 'pcm24', 'pcm32', 'float32', 'float64'] as const) {
  const x = Float32Array.from({ length: 1600 }, (_, i) => Math.sin(i / 9) * 0.5);
  wavSeeds.push(encodeWav({ sampleRate: pick([8000, 16000, 44100]), channels: 1 + int(2), format, extensible: rnd() < 0.5 }, x));
}
const jsonSeeds = {
  config: readFileSync(join(model, 'config.json'), 'utf8'),
  det: readFileSync(join(model, 'audio_detokenizer', 'config.json'), 'utf8'),
  tokenizer: readFileSync(join(model, 'tokenizer.json'), 'utf8'),
};
const safetensors = readFileSync(join(model, 'model.safetensors'));

/** Byte mutations: flips, sets, truncation, extension, a huge length field. */
function mutateBytes(src: Uint8Array, headerBias = 0): Uint8Array {
  let b = Uint8Array.from(src);
  const edits = 1 + int(6);
  for (let e = 0; e < edits; e++) {
    const kind = int(6);
    const at = headerBias > 0 && rnd() < 0.8 ? int(Math.min(headerBias, b.length)) : int(Math.max(1, b.length));
    if (kind === 0 && b.length > 0) b[at] = (b[at] as number) ^ (1 << int(8));
    else if (kind === 1 && b.length > 0) b[at] = pick([0, 0xff, 0x7f, 0x80, int(256)]);
    else if (kind === 2) b = b.slice(0, at);
    else if (kind === 3) {
      const more = new Uint8Array(b.length + 1 + int(64));
      more.set(b);
      b = more;
    } else if (kind === 4 && b.length >= at + 4) new DataView(b.buffer).setUint32(at, pick([0xffffffff, 0x7fffffff, 0, 2 ** 31 + int(1000)]), true);
    else if (kind === 5 && b.length > 0) b.fill(int(256), at, Math.min(b.length, at + 1 + int(32)));
  }
  return b;
}

/** An array nested `depth` deep (built from the inside, so the builder itself does not recurse). */
function nested(depth: number): unknown {
  let v: unknown = [];
  for (let i = 1; i < depth; i++) v = [v];
  return v;
}

const ODD_NUMBERS = [0, -1, 1, 2, 7, 0.5, 1e9, 2 ** 31, 2 ** 53, 1e300, -1e300, Number.NaN, 3.4e38];
/** JSON mutations: a value replaced, a key deleted, a value nested; or the text's bytes mutated. */
function mutateJson(text: string): string {
  if (rnd() < 0.2) return Buffer.from(mutateBytes(Buffer.from(text))).toString('utf8');
  const doc = JSON.parse(text) as Record<string, unknown>;
  const edits = 1 + int(3);
  for (let e = 0; e < edits; e++) {
    let o: Record<string, unknown> = doc;
    for (let depth = 0; depth < 3; depth++) {
      const keys = Object.keys(o);
      if (keys.length === 0) break;
      const k = pick(keys);
      const v = o[k];
      if (v !== null && typeof v === 'object' && rnd() < 0.6) {
        o = v as Record<string, unknown>;
        continue;
      }
      const r = int(9);
      if (r === 0) delete o[k];
      else if (r === 1) o[k] = pick(ODD_NUMBERS);
      else if (r === 2) o[k] = pick(['', 'x', 'conv', 'full_attention', '\u0000', 'é'.repeat(int(50))]);
      else if (r === 3) o[k] = null;
      else if (r === 4) o[k] = Array.from({ length: pick([0, 1, 3, 300, 100_000]) }, () => pick(['conv', 'full_attention', 1]));
      else if (r === 5) o[k] = { [k]: v };
      else if (r === 6) o[k] = nested(pick([20, 1000, 100_000]));
      else if (r === 7) o[k] = 'x'.repeat(pick([70_000, 2_000_000]));
      else o[k] = typeof v === 'number' ? v * pick([2, 10, 1000, -1]) : v;
      break;
    }
  }
  return stringifyDeep(doc, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? (Number.isNaN(v) ? 'NaN' : v > 0 ? '1e999' : '-1e999') : v)).replace(
    /"(NaN|-?1e999)"/g,
    '$1',
  );
}

/** JSON.stringify, except that arrays nested past 500 levels are written as text (stringify recurses). */
function stringifyDeep(doc: unknown, replacer: (k: string, v: unknown) => unknown): string {
  const deep: string[] = [];
  const text = JSON.stringify(doc, (k, v) => {
    let d = 0;
    for (let x: unknown = v; Array.isArray(x) && x.length === 1 && d <= 500; x = x[0]) d++;
    if (d > 500) {
      let n = 0;
      for (let x: unknown = v; Array.isArray(x); x = x[0]) n++;
      deep.push(`${'['.repeat(n)}${']'.repeat(n)}`);
      return `\u0000deep${deep.length - 1}`;
    }
    return replacer(k, v);
  });
  return text.replace(/"\\u0000deep(\d+)"/g, (_, i: string) => deep[Number(i)]!);
}

interface Case {
  id: number;
  kind: string;
  argv: string[];
  out: string | null;
  dir: string;
  /** Environment variables set for this case only. */
  env?: Record<string, string>;
}

const RATES = ['16000', '8000', '48000', '24000', '0', '-1', '1e309', 'x', '384001', '7999', '44100.5', ''];
const SPECIAL_OUT = ['/dev/full', '/nonexistent-folder/x.wav', '/dev/null', '/proc/version', '/proc/x/y.wav', `/tmp/${'n'.repeat(300)}.wav`];
/** Output paths that exist, are files, lie under a file, or are too long, made in the case's folder. */
function oddOutput(dir: string): string {
  const file = join(dir, 'a-file');
  writeFileSync(file, 'x');
  return pick([file, join(file, 'under.wav'), join(dir, `${'l'.repeat(pick([250, 256, 300]))}.wav`), join(dir, 'x/'.repeat(1200), 'deep.wav'), dir]);
}

function makeCase(id: number): Case {
  const dir = join(root, `c${id}`);
  mkdirSync(dir);
  const out = join(dir, pick(['out.wav', 'out.npy', 'sub/out.wav']));
  const r = rnd();
  if (r < 0.35) {
    const input = join(dir, 'in.wav');
    writeFileSync(input, rnd() < 0.9 ? mutateBytes(pick(wavSeeds), 64) : pick(wavSeeds));
    const o = rnd() < 0.85 ? out : rnd() < 0.3 ? input : rnd() < 0.5 ? oddOutput(dir) : pick([...SPECIAL_OUT, dir]);
    return { id, kind: 'resample', argv: ['resample', '--in', input, '--rate', pick(RATES), '--out', o], out: o === input ? null : o, dir };
  }
  if (r < 0.6) {
    const input = join(dir, 'in.wav');
    writeFileSync(input, rnd() < 0.9 ? mutateBytes(pick(wavSeeds), 64) : pick(wavSeeds));
    const o = rnd() < 0.85 ? out : rnd() < 0.5 ? oddOutput(dir) : pick([...SPECIAL_OUT, dir, input]);
    return { id, kind: 'mel', argv: ['mel', '--in', input, '--out', o], out: o === input ? null : o, dir };
  }
  if (r < 0.8) {
    const cfg = join(dir, 'config.json');
    writeFileSync(cfg, mutateJson(jsonSeeds.config));
    mkdirSync(join(dir, 'audio_detokenizer'));
    writeFileSync(join(dir, 'audio_detokenizer', 'config.json'), rnd() < 0.5 ? mutateJson(jsonSeeds.det) : jsonSeeds.det);
    const argv = ['plan', '--config', cfg, ...(rnd() < 0.3 ? ['--conversations', pick(['1', '2', '0', '-3', '1e9', 'x'])] : [])];
    return { id, kind: 'plan', argv: rnd() < 0.2 ? [...argv, '--context', pick(['1', '0', '128000', '9999999', '-5', 'nan'])] : argv, out: null, dir };
  }
  if (r < 0.88) {
    // Counts and lengths at their limits, odd environment variables and outputs, through a real run.
    const input = join(dir, 'in.wav');
    writeFileSync(input, hello);
    const argv = ['run', '--model', model, '--in', input, '--out', rnd() < 0.7 ? out : rnd() < 0.5 ? oddOutput(dir) : pick(SPECIAL_OUT)];
    argv.push('--reply', pick(['0.01', '0.5', '1', '1', '2', '0', '3601', '-1', '1e309', 'NaN']));
    if (rnd() < 0.5) argv.push('--threads', pick(['1', '2', '8', '9', '0', '64', '1.5']));
    if (rnd() < 0.4) argv.push('--segment', pick(['0', '0.1', '600', '601', '1e9']));
    if (rnd() < 0.3) argv.push('--context', pick(['1', '64', '4096', '4097', '0']));
    if (rnd() < 0.3) argv.push('--slots', pick(['1', '2', '3', '0', '64']));
    if (rnd() < 0.3) argv.push('--report', rnd() < 0.5 ? join(dir, 'r.json') : oddOutput(dir));
    if (rnd() < 0.2) argv.push('--dump', rnd() < 0.5 ? join(dir, 'dump') : oddOutput(dir));
    if (rnd() < 0.6) argv.push('--engine', 'single');
    const env: Record<string, string> = {};
    if (rnd() < 0.5) env.VOXSLAB_MEMORY_LIMIT = pick(['0', '-1', '1', '1KiB', '20MiB', '64MiB', '1e999', 'x', '99999999GiB', '', '768MiB']);
    if (rnd() < 0.2) env.VOXSLAB_CAPTURE_MIRROR = pick(['off', 'on', '', 'x']);
    return { id, kind: 'limits', argv, out: argv[6]!, dir, env };
  }
  if (r < 0.97) {
    // Random command lines from the vocabulary of every command and flag.
    const commands = ['run', 'plan', 'resample', 'mel', 'quantize', 'make-checkpoint', 'devices', 'bench', 'nope', 'help', '--version'];
    const flags = [
      '--model',
      '--in',
      '--out',
      '--rate',
      '--config',
      '--reply',
      '--seed',
      '--context',
      '--threads',
      '--bits',
      '--group',
      '--dtype',
      '--json',
      '--engine',
      '--slots',
      '--pin',
      '--report',
      '--realtime',
      '--raw',
      '-h',
      '--',
    ];
    const valuesPool = [
      ...RATES,
      'tiny',
      'small',
      model,
      join(model, 'model.safetensors'),
      '/dev/zero',
      dir,
      '/',
      'f32',
      'q4',
      'single',
      'none',
      'capture=99',
      '4',
      '64',
      '--in',
    ];
    const argv = [pick(commands)];
    const n = int(8);
    for (let i = 0; i < n; i++) argv.push(rnd() < 0.6 ? pick(flags) : pick(valuesPool));
    // Never a command that writes into the seed model or generates large files.
    if (argv.includes('make-checkpoint') || argv.includes('quantize') || argv[0] === 'bench') argv.splice(0, 1, 'plan');
    return { id, kind: 'argv', argv, out: null, dir };
  }
  // A mutated checkpoint: one file changed, the rest linked.
  const m = join(dir, 'm');
  mkdirSync(join(m, 'audio_detokenizer'), { recursive: true });
  const which = int(4);
  writeFileSync(join(m, 'config.json'), which === 0 ? mutateJson(jsonSeeds.config) : jsonSeeds.config);
  writeFileSync(join(m, 'audio_detokenizer', 'config.json'), which === 1 ? mutateJson(jsonSeeds.det) : jsonSeeds.det);
  writeFileSync(join(m, 'tokenizer.json'), which === 2 ? mutateJson(jsonSeeds.tokenizer) : jsonSeeds.tokenizer);
  copyFileSync(join(model, 'tokenizer_config.json'), join(m, 'tokenizer_config.json'));
  if (which === 3)
    writeFileSync(
      join(m, 'model.safetensors'),
      mutateBytes(safetensors, 8 + Number(new DataView(safetensors.buffer, safetensors.byteOffset).getBigUint64(0, true))),
    );
  else symlinkSync(join(model, 'model.safetensors'), join(m, 'model.safetensors'));
  symlinkSync(join(model, 'audio_detokenizer', 'model.safetensors'), join(m, 'audio_detokenizer', 'model.safetensors'));
  const input = join(dir, 'in.wav');
  writeFileSync(input, hello);
  return { id, kind: 'run', argv: ['run', '--model', m, '--in', input, '--out', out, '--reply', '1', '--engine', 'single'], out, dir };
}

const CLASSES = ['success', 'refusal', 'crash', 'hang', 'resource', 'trace', 'exit-code', 'partial', 'non-finite'] as const;
type Class = (typeof CLASSES)[number];
const counts = Object.fromEntries(CLASSES.map((c) => [c, 0])) as Record<Class, number>;
const byKind: Record<string, Record<string, number>> = {};
const examples: { class: Class; argv: string[]; detail: string }[] = [];

function classify(c: Case, code: number, stderr: string, escaped: string | null): { cls: Class; detail: string } {
  if (escaped !== null) return { cls: 'crash', detail: escaped.slice(0, 300) };
  if (code === 1) return { cls: 'trace', detail: stderr.slice(0, 300) };
  if (code === 0) {
    if (c.out?.endsWith('.wav') && existsSync(c.out) && c.argv[0] !== 'mel') {
      try {
        const { samples } = readWavMono(memorySource(readFileSync(c.out), c.out));
        if (!samples.every(Number.isFinite)) return { cls: 'non-finite', detail: c.out };
      } catch (e) {
        return { cls: 'non-finite', detail: `unreadable output: ${(e as Error).message}` };
      }
    }
    return { cls: 'success', detail: '' };
  }
  if (code !== 2 && code !== 3 && code !== 4) return { cls: 'exit-code', detail: `exit ${code}: ${stderr.slice(0, 200)}` };
  // A refused case leaves no output and no temporary file (outputs that existed before are not its own).
  if (c.out !== null && !c.out.startsWith('/dev/') && !c.out.startsWith('/proc/') && !c.out.endsWith('a-file') && c.out !== c.dir && existsSync(c.out))
    return { cls: 'partial', detail: c.out };
  const left = readdirSync(c.dir).find((f) => f.includes('.partial'));
  if (left !== undefined) return { cls: 'partial', detail: join(c.dir, left) };
  const lines = stderr
    .trim()
    .split('\n')
    .filter((l) => l.length > 0);
  if (lines.length > 1 && lines.some((l) => /^\s+at /.test(l))) return { cls: 'trace', detail: stderr.slice(0, 300) };
  return { cls: 'refusal', detail: '' };
}

const runner = new URL('./runner.js', import.meta.url);
const deadline = performance.now() + SECONDS * 1000;
let next = 0;
let done = 0;
const started = performance.now();

function record(c: Case, cls: Class, detail: string): void {
  counts[cls]++;
  const k = byKind[c.kind] ?? {};
  byKind[c.kind] = k;
  k[cls] = (k[cls] ?? 0) + 1;
  if (cls !== 'success' && cls !== 'refusal' && examples.length < 40)
    examples.push({ class: cls, argv: c.argv.map((a) => a.replace(root, '$ROOT')), detail: detail.replaceAll(root, '$ROOT') });
  rmSync(c.dir, { recursive: true, force: true });
  done++;
  if (done % 5000 === 0) process.stderr.write(`fuzz: ${done} cases, ${((performance.now() - started) / 1000).toFixed(0)} s\n`);
}

async function lane(): Promise<void> {
  const spawn = () =>
    new Worker(runner, {
      env: { ...process.env, VOXSLAB_MEMORY_LIMIT: '768MiB', VOXSLAB_CACHE: join(root, 'cache') },
      resourceLimits: { maxOldGenerationSizeMb: 1024 },
    });
  let w = spawn();
  while (next < CASES && performance.now() < deadline) {
    const c = makeCase(next++);
    const result = await new Promise<{ code: number; stderr: string; escaped: string | null } | Class>((resolve) => {
      const timer = setTimeout(() => resolve('hang'), CASE_MS);
      const onMessage = (m: { code: number; stderr: string; escaped: string | null }) => {
        cleanup();
        resolve(m);
      };
      const onError = (e: Error) => {
        cleanup();
        resolve((e as { code?: string }).code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'resource' : 'crash');
      };
      const onExit = () => {
        cleanup();
        resolve('crash');
      };
      const cleanup = () => {
        clearTimeout(timer);
        w.off('message', onMessage);
        w.off('error', onError);
        w.off('exit', onExit);
      };
      w.on('message', onMessage);
      w.on('error', onError);
      w.on('exit', onExit);
      w.postMessage({ id: c.id, argv: c.argv, env: c.env ?? {} });
    });
    if (typeof result === 'string') {
      record(c, result, 'the worker was replaced');
      await w.terminate();
      w = spawn();
    } else {
      const { cls, detail } = classify(c, result.code, result.stderr, result.escaped);
      record(c, cls, detail);
    }
  }
  await w.terminate();
}

await Promise.all(Array.from({ length: WORKERS }, lane));
rmSync(root, { recursive: true, force: true });
const bad = CLASSES.filter((c) => c !== 'success' && c !== 'refusal').reduce((a, c) => a + counts[c], 0);
const summary = { cases: done, seconds: Math.round((performance.now() - started) / 1000), counts, byKind, examples };
if (values.json === true) console.log(JSON.stringify(summary, null, 2));
else {
  console.log(`fuzz: ${done} cases in ${summary.seconds} s`);
  for (const c of CLASSES) console.log(`  ${c.padEnd(11)} ${counts[c]}`);
  for (const [k, v] of Object.entries(byKind)) console.log(`  ${k}: ${JSON.stringify(v)}`);
  for (const e of examples.slice(0, 15)) console.log(`  ${e.class}: ${e.argv.join(' ')} — ${e.detail}`);
}
console.log(bad === 0 ? 'fuzz: ok' : `fuzz: ${bad} cases outside success and refusal`);
process.exit(bad === 0 ? 0 : 1);
