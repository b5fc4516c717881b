import t from 'tap';
import { join } from 'node:path';
import { BadInputError } from '../../src/errors.js';
import { encodeWav, memorySource, readWavInfo, readWavMono, type SampleFormat, WavReader } from '../../src/dsp/wav.js';
import { openFileSource, WavFileWriter } from '../../src/io/files.js';
import { prng, scratchDir } from '../helpers.js';

const FORMATS: SampleFormat[] = ['pcm8', 'pcm16', 'pcm24', 'pcm32', 'float32', 'float64'];
const STEP: Record<SampleFormat, number> = { pcm8: 1 / 128, pcm16: 1 / 32768, pcm24: 1 / 8388608, pcm32: 2 ** -31, float32: 0, float64: 0 };

t.test('round trip for every format, channel count and header kind', async (t) => {
  const r = prng(1);
  for (const format of FORMATS) {
    for (const channels of [1, 2, 3]) {
      for (const extensible of [false, true]) {
        const frames = 1001; // odd, so 8-bit mono data needs a pad byte
        const x = new Float32Array(frames * channels).map(() => (r() * 2 - 1) * 0.99);
        x[0] = -1;
        const bytes = encodeWav({ sampleRate: 44100, channels, format, extensible }, x);
        const src = memorySource(bytes, `${format}-${channels}ch${extensible ? '-ext' : ''}.wav`);
        const info = readWavInfo(src);
        t.match(info, { sampleRate: 44100, channels, format, extensible, frames }, src.name, { diagnostic: false });
        const reader = new WavReader(src, 7); // a small buffer: many refills
        const y = new Float32Array(x.length);
        t.equal(reader.read(y), frames);
        let worst = 0;
        for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs((y[i] as number) - (x[i] as number)));
        t.ok(worst <= STEP[format] / 2 + 1e-12, `${src.name}: max error ${worst}`, { diagnostic: false });
        t.equal(reader.read(y), 0, 'then end of data');
        const mono = readWavMono(memorySource(bytes, src.name)).samples;
        let monoErr = 0;
        for (let f = 0; f < frames; f++) {
          let s = 0;
          for (let c = 0; c < channels; c++) s += y[f * channels + c] as number;
          monoErr = Math.max(monoErr, Math.abs(s / channels - (mono[f] as number)));
        }
        t.ok(monoErr < 1e-6, 'mono is the mean of the channels', { diagnostic: false });
      }
    }
  }
});

t.test('unknown chunks, LIST metadata and odd sizes are skipped', async (t) => {
  const x = new Float32Array([0.5, -0.5, 0.25]);
  const plain = encodeWav({ sampleRate: 16000, channels: 1, format: 'pcm16', extensible: false }, x);
  // Insert LIST (odd size 5, padded) and a 'junk' chunk between fmt and data.
  const extra = new Uint8Array(
    [...'LIST']
      .map((c) => c.charCodeAt(0))
      .concat(
        [5, 0, 0, 0, 1, 2, 3, 4, 5, 0],
        [...'junk'].map((c) => c.charCodeAt(0)),
        [2, 0, 0, 0, 9, 9],
      ),
  );
  const fmtEnd = 12 + 8 + 16;
  const bytes = new Uint8Array(plain.length + extra.length);
  bytes.set(plain.subarray(0, fmtEnd));
  bytes.set(extra, fmtEnd);
  bytes.set(plain.subarray(fmtEnd), fmtEnd + extra.length);
  const { samples } = readWavMono(memorySource(bytes, 'chunks.wav'));
  t.same(Array.from(samples), [0.5, -0.5, 0.25]);
});

t.test('files stream through the file source and writer', async (t) => {
  const dir = scratchDir('voxslab-wav-');
  const path = join(dir, 'long.wav');
  const w = new WavFileWriter(path, { sampleRate: 48000, channels: 2, format: 'pcm24', extensible: true }, { bufferFrames: 100 });
  const r = prng(5);
  const all = new Float32Array(2 * 48000);
  for (let i = 0; i < all.length; i += 2000) {
    const part = all.subarray(i, i + 2000);
    for (let j = 0; j < part.length; j++) part[j] = r() - 0.5;
    w.write(part);
  }
  w.close();
  const src = openFileSource(path);
  const reader = new WavReader(src, 256);
  t.match(reader.info, { frames: 48000, channels: 2, sampleRate: 48000, format: 'pcm24' });
  const back = new Float32Array(all.length);
  let got = 0;
  const piece = new Float32Array(2 * 333);
  for (let n = reader.read(piece); n > 0; n = reader.read(piece)) {
    back.set(piece.subarray(0, 2 * n), got * 2);
    got += n;
  }
  src.close();
  t.equal(got, 48000);
  let worst = 0;
  for (let i = 0; i < all.length; i++) worst = Math.max(worst, Math.abs((back[i] as number) - (all[i] as number)));
  t.ok(worst < 1 / 8388608, `24-bit error ${worst}`);
  t.throws(() => openFileSource(join(dir, 'missing.wav')), { name: 'BadInputError', message: /missing\.wav: cannot open \(ENOENT\)/ });
});

/** A valid 16-bit mono file to damage, with the offsets of its fields. */
function base(format: SampleFormat = 'pcm16', extensible = false, frames = 8): Uint8Array {
  return encodeWav({ sampleRate: 16000, channels: 1, format, extensible }, new Float32Array(frames).fill(0.1));
}
const put32 = (b: Uint8Array, at: number, v: number) => new DataView(b.buffer).setUint32(at, v, true);
const put16 = (b: Uint8Array, at: number, v: number) => new DataView(b.buffer).setUint16(at, v, true);
const putStr = (b: Uint8Array, at: number, s: string) => {
  for (let i = 0; i < s.length; i++) b[at + i] = s.charCodeAt(i);
};
const mutate = (f: (b: Uint8Array) => void, b = base()): Uint8Array => {
  const c = b.slice();
  f(c);
  return c;
};

t.test('a corpus of malformed files: each a BadInputError naming field and offset', async (t) => {
  const ext = () => base('pcm16', true);
  const corpus: [string, Uint8Array, RegExp][] = [
    ['empty', new Uint8Array(0), /RIFF header, offset 0: truncated/],
    ['five bytes', base().subarray(0, 5), /RIFF header, offset 0: truncated/],
    ['RIFX', mutate((b) => putStr(b, 0, 'RIFX')), /RIFX files are not supported/],
    ['RF64', mutate((b) => putStr(b, 0, 'RF64')), /RF64 files are not supported/],
    ['not RIFF', mutate((b) => putStr(b, 0, 'JUNK')), /field RIFF header, offset 0: not a RIFF file/],
    ['not WAVE', mutate((b) => putStr(b, 8, 'AVI ')), /field RIFF form type, offset 8: not a WAVE file/],
    ['header only', base().subarray(0, 12), /field fmt chunk, offset 12: no fmt chunk/],
    ['truncated chunk header', base().subarray(0, 15), /field chunk header, offset 12: truncated/],
    ['fmt too short', mutate((b) => put32(b, 16, 10)), /field fmt chunk size, offset 16: 10 bytes is shorter than the 16/],
    ['fmt past the end', base().subarray(0, 30), /field fmt chunk size, offset 16: 16 bytes runs past the end/],
    ['ADPCM', mutate((b) => put16(b, 20, 2)), /field fmt\.audioFormat, offset 20: unsupported format tag 0x2/],
    ['MP3', mutate((b) => put16(b, 20, 0x55)), /unsupported format tag 0x55/],
    ['zero channels', mutate((b) => put16(b, 22, 0)), /field fmt\.channels, offset 22: zero channels/],
    ['too many channels', mutate((b) => put16(b, 22, 1000)), /field fmt\.channels, offset 22: 1000 channels/],
    ['zero rate', mutate((b) => put32(b, 24, 0)), /field fmt\.sampleRate, offset 24: sample rate 0 Hz/],
    ['absurd rate', mutate((b) => put32(b, 24, 5_000_000)), /field fmt\.sampleRate, offset 24: sample rate 5000000 Hz/],
    ['tiny rate', mutate((b) => put32(b, 24, 100)), /sample rate 100 Hz is outside/],
    ['12-bit PCM', mutate((b) => put16(b, 34, 12)), /field fmt\.bitsPerSample, offset 34: 12 bits is not supported for PCM/],
    [
      '16-bit float',
      mutate((b) => {
        put16(b, 20, 3);
      }),
      /field fmt\.bitsPerSample, offset 34: 16 bits is not supported for float/,
    ],
    ['block align', mutate((b) => put16(b, 32, 4)), /field fmt\.blockAlign, offset 32: block align 4 does not match 1 channel\(s\) × 16 bits/],
    [
      'data longer than file',
      mutate((b) => put32(b, 40, 1000)),
      /field data chunk size, offset 40: data chunk of 1000 bytes is longer than the file \(16 bytes follow\)/,
    ],
    ['data size not whole frames', mutate((b) => put32(b, 40, 15)), /field data chunk size, offset 40: 15 bytes is not a whole number of 2-byte frames/],
    ['data before fmt', mutate((b) => putStr(b, 12, 'data')), /field data chunk, offset 12: data chunk before the fmt chunk/],
    ['no data chunk', mutate((b) => putStr(b, 36, 'wxyz')), /field wxyz chunk size, offset 40|no data chunk/],
    [
      'second fmt',
      (() => {
        const b = base();
        const c = new Uint8Array(b.length + 24);
        c.set(b.subarray(0, 36));
        c.set(b.subarray(12, 36), 36);
        c.set(b.subarray(36), 60);
        return c;
      })(),
      /field fmt chunk, offset 36: a second fmt chunk/,
    ],
    [
      'unknown chunk past the end',
      (() => {
        const b = base();
        const c = new Uint8Array(b.length + 8);
        c.set(b.subarray(0, 36));
        putStr(c, 36, 'junk');
        put32(c, 40, 999999);
        c.set(b.subarray(36), 44);
        return c;
      })(),
      /field junk chunk size, offset 40: chunk of 999999 bytes runs past the end/,
    ],
    [
      'binary chunk id',
      mutate((b) => {
        b[36] = 0;
        b[37] = 1;
      }),
      /field chunk id, offset 36: invalid chunk id/,
    ],
    ['extensible too short', mutate((b) => put16(b, 20, 0xfffe)), /field fmt chunk size, offset 16: WAVE_FORMAT_EXTENSIBLE needs 40 bytes/],
    ['extensible cbSize', mutate((b) => put16(b, 36, 0), ext()), /field fmt\.cbSize, offset 36: WAVE_FORMAT_EXTENSIBLE needs cbSize 22, got 0/],
    ['extensible valid bits', mutate((b) => put16(b, 38, 24), ext()), /field fmt\.validBitsPerSample, offset 38: 24 valid bits exceeds 16/],
    ['extensible sub-format', mutate((b) => put16(b, 44, 2), ext()), /field fmt\.subFormat, offset 44: unsupported format tag 0x2/],
    ['extensible GUID', mutate((b) => (b[50] = 0x77), ext()), /field fmt\.subFormat, offset 44: unknown sub-format GUID/],
    // Float files have an 18-byte fmt chunk (with cbSize): data starts at byte 46.
    [
      'NaN sample',
      mutate((b) => new DataView(b.buffer).setFloat32(46 + 4 * 3, Number.NaN, true), base('float32')),
      /field data, offset 58: sample is NaN \(frame 3, channel 0\)/,
    ],
    [
      'infinite sample',
      mutate((b) => new DataView(b.buffer).setFloat64(46, Number.POSITIVE_INFINITY, true), base('float64')),
      /field data, offset 46: sample is Infinity/,
    ],
  ];
  t.ok(corpus.length >= 30, `${corpus.length} malformed files`);
  for (const [name, bytes, pattern] of corpus) {
    const file = `${name}.wav`;
    let err: unknown;
    try {
      const { samples } = readWavMono(memorySource(bytes, file));
      t.fail(`${name}: accepted (${samples.length} samples)`);
      continue;
    } catch (e) {
      err = e;
    }
    t.type(err, BadInputError, `${name}: BadInputError`, { diagnostic: false });
    t.match((err as Error).message, new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, `), `${name}: names the file`, { diagnostic: false });
    t.match((err as Error).message, pattern, name);
  }
});

t.test('a file truncated while it is being read is a clean error', async (t) => {
  const bytes = base('pcm16', false, 1000);
  let size = bytes.length;
  const src = {
    name: 'shrinking.wav',
    get size() {
      return size;
    },
    read: memorySource(bytes).read,
  };
  const r = new WavReader(src, 64);
  size = 100;
  const shortSrc = {
    name: 'shrinking.wav',
    size: bytes.length,
    read: (into: Uint8Array, o: number, l: number, p: number) => (p > 200 ? 0 : memorySource(bytes).read(into, o, l, p)),
  };
  const r2 = new WavReader(shortSrc, 64);
  t.throws(() => r2.readMono(new Float32Array(1000)), {
    name: 'BadInputError',
    message: /shrinking\.wav, field data, offset \d+: the file ended inside the data chunk/,
  });
  t.ok(r.info.frames === 1000);
});
