import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeWav, memorySource, readWavInfo, WavReader } from '../../src/dsp/wav.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000 });
const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
const dir = scratchDir('voxslab-audio-');

/** Parses a float32 .npy written by voxslab mel. */
function readNpy(path: string): { shape: number[]; data: Float32Array } {
  const b = readFileSync(path);
  t.same([...b.subarray(0, 6)], [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59], 'npy magic');
  const len = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + len).toString('latin1');
  t.equal((10 + len) % 64, 0, 'header padded to 64 bytes');
  t.match(header, /'descr': '<f4', 'fortran_order': False/);
  const shape = (/'shape': \(([^)]*)\)/.exec(header)?.[1] ?? '')
    .split(',')
    .filter((s) => s.trim() !== '')
    .map(Number);
  const body = b.subarray(10 + len);
  return { shape, data: new Float32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)) };
}

t.test(
  'speech: resample to 16 kHz, then mel features',
  { skip: has('espeak-ng') ? false : process.env.CI ? false : 'espeak-ng is not installed (CI installs it)' },
  async (t) => {
    const speech = join(dir, 'speech.wav');
    execFileSync('espeak-ng', ['-w', speech, 'The quick brown fox jumps over the lazy dog.']);
    const info = readWavInfo(memorySource(readFileSync(speech), speech));
    const r16 = join(dir, 'speech16.wav');
    const rs = voxslab('resample', '--in', speech, '--rate', '16000', '--out', r16);
    t.equal(rs.status, 0, rs.stderr);
    const out = readWavInfo(memorySource(readFileSync(r16), r16));
    t.equal(out.sampleRate, 16000);
    t.equal(out.frames, Math.ceil((info.frames * 16000) / info.sampleRate), 'ceil(N · out / in) frames');
    if (has('sox')) {
      t.equal(execFileSync('soxi', ['-r', r16], { encoding: 'utf8' }).trim(), '16000', 'sox reads the rate');
      t.equal(Number(execFileSync('soxi', ['-s', r16], { encoding: 'utf8' }).trim()), out.frames, 'sox reads the length');
    }
    const npy = join(dir, 'speech.npy');
    const mel = voxslab('mel', '--in', r16, '--out', npy);
    t.equal(mel.status, 0, mel.stderr);
    const { shape, data } = readNpy(npy);
    t.same(shape, [1 + Math.floor(out.frames / 160), 128], 'shape [1 + L // 160, 128]');
    const valid = Math.floor(out.frames / 160);
    for (const m of [0, 40, 127]) {
      let s = 0;
      let s2 = 0;
      for (let i = 0; i < valid; i++) s += data[i * 128 + m] as number;
      const mean = s / valid;
      for (let i = 0; i < valid; i++) s2 += ((data[i * 128 + m] as number) - mean) ** 2;
      t.ok(Math.abs(mean) < 1e-4 && Math.abs(Math.sqrt(s2 / (valid - 1)) - 1) < 1e-3, `feature ${m} normalised`);
    }
    t.ok(
      data.subarray(valid * 128).every((v) => v === 0),
      'tail frame zeroed',
    );
    const raw = join(dir, 'raw.npy');
    t.equal(voxslab('mel', '--in', r16, '--out', raw, '--raw').status, 0);
    t.ok(
      readNpy(raw).data.some((v) => v < -5),
      'raw rows are log-mel',
    );

    const wrongRate = voxslab('mel', '--in', speech, '--out', join(dir, 'x.npy'));
    t.equal(wrongRate.status, 4);
    t.match(wrongRate.stderr, /speech\.wav, field fmt\.sampleRate: the frontend needs 16000 Hz audio, this file is 22050 Hz/);
  },
);

t.test('resample keeps every channel and the sample format', async (t) => {
  const stereo = join(dir, 'stereo.wav');
  const n = 4800;
  const x = new Float32Array(2 * n);
  for (let i = 0; i < n; i++) {
    x[2 * i] = 0.5 * Math.sin((2 * Math.PI * 440 * i) / 48000);
    x[2 * i + 1] = -0.25 * Math.sin((2 * Math.PI * 440 * i) / 48000);
  }
  writeFileSync(stereo, encodeWav({ sampleRate: 48000, channels: 2, format: 'float32', extensible: true }, x));
  const out = join(dir, 'stereo441.wav');
  const r = voxslab('resample', '--in', stereo, '--rate', '44100', '--out', out);
  t.equal(r.status, 0, r.stderr);
  const reader = new WavReader(memorySource(readFileSync(out), out));
  t.match(reader.info, { sampleRate: 44100, channels: 2, format: 'float32', frames: Math.ceil((n * 441) / 480) });
  const y = new Float32Array(reader.info.frames * 2);
  reader.read(y);
  let ratio = 0;
  for (let i = 500; i < 1000; i++) ratio += (y[2 * i + 1] as number) / (y[2 * i] as number);
  t.ok(Math.abs(ratio / 500 + 0.5) < 1e-3, 'channels stay apart');
});

t.test('bad input and usage exit 4 and 2 with the reason', async (t) => {
  const junk = join(dir, 'junk.wav');
  writeFileSync(junk, 'this is not audio');
  const a = voxslab('resample', '--in', junk, '--rate', '16000', '--out', join(dir, 'o.wav'));
  t.equal(a.status, 4);
  t.match(a.stderr, /junk\.wav, field RIFF header, offset 0/);
  const b = voxslab('mel', '--in', join(dir, 'absent.wav'), '--out', join(dir, 'o.npy'));
  t.equal(b.status, 4);
  t.match(b.stderr, /absent\.wav: cannot open \(ENOENT\)/);
  t.equal(voxslab('resample', '--in', junk, '--rate', 'fast', '--out', 'o.wav').status, 2);
  t.equal(voxslab('resample', '--in', junk, '--rate', '10', '--out', 'o.wav').status, 2);
  t.equal(voxslab('mel', '--in', junk).status, 2);
});
