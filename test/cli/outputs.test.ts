// Bad input through the CLI as a fuzzer found it: data loss, partial outputs, unbounded reads,
// stack traces for user mistakes. Each case failed before its fix.
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { encodeWav } from '../../src/dsp/wav.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-outputs-');
const voxslab = (...args: string[]) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000, cwd: work, env: { ...process.env, VOXSLAB_CACHE: join(work, 'cache') } });

/** Exit code and one clean line: no stack trace, no internal fault. */
function refused(t: Test, r: ReturnType<typeof voxslab>, code: number, message: RegExp): void {
  t.equal(r.status, code, `exit ${code}: ${r.stderr.trim()}`);
  t.match(r.stderr, message);
  t.notMatch(r.stderr, /internal fault|\n\s+at /, 'no stack trace');
}

t.test('an output that is an input is refused before anything is written', async (t) => {
  const x = join(work, 'x.wav');
  copyFileSync(fixture, x);
  const before = readFileSync(x);
  refused(t, voxslab('resample', '--in', x, '--out', x, '--rate', '8000'), 2, /--out '.*x\.wav' is also --in/);
  refused(t, voxslab('resample', '--in', x, '--out', join(work, '.', 'sub', '..', 'x.wav'), '--rate', '8000'), 2, /is also --in/);
  refused(t, voxslab('mel', '--in', x, '--out', x), 2, /is also --in/);
  t.ok(readFileSync(x).equals(before), 'the input is untouched');
  const m = join(work, 'm');
  makeCheckpoint({ config: 'tiny', seed: 2, out: m, dtype: 'f32' });
  const weights = readFileSync(join(m, 'model.safetensors'));
  refused(t, voxslab('quantize', '--in', m, '--out', m, '--bits', '8'), 2, /--out '.*m' is also --in/);
  t.ok(readFileSync(join(m, 'model.safetensors')).equals(weights), 'the checkpoint is untouched');
});

t.test('a failure leaves no partial output', async (t) => {
  // A float WAV with a NaN in its second half: resample refuses it and writes nothing.
  const samples = new Float32Array(32000).map((_, i) => Math.sin(i / 9) * 0.3);
  samples[20000] = Number.NaN;
  const nan = join(work, 'nan.wav');
  writeFileSync(nan, encodeWav({ sampleRate: 16000, channels: 1, format: 'float32', extensible: false }, samples));
  const out = join(work, 'out', 'r.wav');
  mkdirSync(join(work, 'out'), { recursive: true });
  const r = voxslab('resample', '--in', nan, '--out', out, '--rate', '8000');
  t.equal(r.status, 4, r.stderr);
  t.same(readdirSync(join(work, 'out')), [], 'no reply file, no temporary file');
  // quantize with a broken detokenizer file: no output folder at all.
  const bad = join(work, 'bad');
  makeCheckpoint({ config: 'tiny', seed: 2, out: bad, dtype: 'f32' });
  writeFileSync(join(bad, 'audio_detokenizer', 'model.safetensors'), 'not a safetensors file');
  const q = voxslab('quantize', '--in', bad, '--out', join(work, 'q'), '--bits', '4');
  t.equal(q.status, 4, q.stderr);
  t.notOk(existsSync(join(work, 'q')), 'no half-written checkpoint');
  t.same(
    readdirSync(work).filter((f) => f.includes('partial')),
    [],
    'no temporary folder',
  );
});

t.test('user mistakes about files are one line and exit 4, never a stack trace', async (t) => {
  const folder = join(work, 'folder.wav');
  mkdirSync(folder, { recursive: true });
  refused(t, voxslab('mel', '--in', folder, '--out', join(work, 'o.npy')), 4, /folder\.wav: is a folder, not a file/);
  refused(t, voxslab('run', '--model', 'tiny', '--in', folder, '--out', join(work, 'o.wav')), 4, /is a folder, not a file/);
  refused(t, voxslab('mel', '--in', fixture, '--out', join(work, 'missing', 'o.npy')), 4, /field --out: its folder .*missing does not exist/);
  refused(t, voxslab('mel', '--in', fixture, '--out', folder), 4, /field --out: is a folder/);
  refused(t, voxslab('resample', '--in', fixture, '--out', '/dev/full', '--rate', '8000'), 4, /\/dev\/full, field --out: exists and is not a regular file/);
  refused(t, voxslab('plan', '--config', '/dev/zero'), 4, /\/dev\/zero: the configuration is not a regular file/);
  const cacheFile = join(work, 'cache-file');
  writeFileSync(cacheFile, 'x');
  const r = spawnSync(process.execPath, [cli, 'run', '--model', 'tiny', '--in', fixture, '--out', join(work, 'o.wav')], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, VOXSLAB_CACHE: cacheFile },
  });
  refused(t, r, 4, /cache-file, field VOXSLAB_CACHE: cannot make the built-in 'tiny' checkpoint there/);
  t.equal(statSync(cacheFile).size, 1);
});

t.test('a configuration file is read with a size limit', async (t) => {
  const big = join(work, 'big.json');
  writeFileSync(big, `{"pad": "${'x'.repeat(2 << 20)}"}`);
  refused(t, voxslab('plan', '--config', big), 4, /big\.json: the configuration is \d+ bytes; the limit is 1048576/);
});

t.test('samples too large for 32-bit floats are refused, never written as Inf or NaN', async (t) => {
  const huge64 = join(work, 'huge64.wav');
  // Written as float64 bytes: 1e300 would become Infinity on its way through a Float32Array.
  const wav = Buffer.from(encodeWav({ sampleRate: 16000, channels: 1, format: 'float64', extensible: false }, new Float32Array(16000)));
  const data = wav.length - 16000 * 8;
  for (let i = 0; i < 16000; i++) wav.writeDoubleLE(i === 5000 ? 1e300 : Math.sin(i / 9) * 0.3, data + 8 * i);
  writeFileSync(huge64, wav);
  refused(
    t,
    voxslab('resample', '--in', huge64, '--out', join(work, 'h1.wav'), '--rate', '8000'),
    4,
    /huge64\.wav, field data, offset \d+: sample is 1e\+300 \(beyond the 32-bit float range/,
  );
  refused(t, voxslab('run', '--model', 'tiny', '--in', huge64, '--out', join(work, 'h2.wav'), '--reply', '1'), 4, /sample is 1e\+300/);
  const huge32 = join(work, 'huge32.wav');
  // A step to near the float32 maximum: the band-limited step overshoots past it.
  const y = new Float32Array(16000).fill(3.4e38);
  writeFileSync(huge32, encodeWav({ sampleRate: 16000, channels: 1, format: 'float32', extensible: false }, y));
  refused(t, voxslab('resample', '--in', huge32, '--out', join(work, 'h3.wav'), '--rate', '8000'), 4, /huge32\.wav, field data: samples this large overflow/);
  t.notOk(existsSync(join(work, 'h1.wav')) || existsSync(join(work, 'h2.wav')) || existsSync(join(work, 'h3.wav')), 'no output written');
});
