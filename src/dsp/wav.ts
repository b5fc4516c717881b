/**
 * RIFF/WAVE reading and writing. Reads PCM 8/16/24/32-bit integer and 32/64-bit float, plain
 * or WAVE_FORMAT_EXTENSIBLE, any channel count; skips unknown chunks (LIST included) and honours
 * odd-size padding. Reading streams through one fixed buffer, so long files are never loaded
 * whole. Malformed input is a BadInputError naming the file, the field and the byte offset.
 *
 * Pure computation over a `ByteSource`; files are opened at the edge (io/files).
 */
import { BadInputError } from '../errors.js';
import { WAV_MAX_HZ, WAV_MIN_HZ } from '../options.js';
import type { ByteSource } from '../bytes.js';
export { memorySource, type ByteSource } from '../bytes.js';

/** The largest finite 32-bit float: samples beyond it cannot be represented downstream. */
const F32_MAX = 3.4028234663852886e38;

export type SampleFormat = 'pcm8' | 'pcm16' | 'pcm24' | 'pcm32' | 'float32' | 'float64';

export interface WavFormat {
  sampleRate: number;
  channels: number;
  format: SampleFormat;
  /** Written as WAVE_FORMAT_EXTENSIBLE. */
  extensible: boolean;
}

export interface WavInfo extends WavFormat {
  /** Sample frames (one sample per channel) in the data chunk. */
  frames: number;
  /** Byte offset of the first sample. */
  dataOffset: number;
  dataBytes: number;
  blockAlign: number;
}

const GUID_TAIL = [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71];
const WAVE_FORMAT_PCM = 1;
const WAVE_FORMAT_IEEE_FLOAT = 3;
const WAVE_FORMAT_EXTENSIBLE = 0xfffe;
/** Channel counts above this are refused as absurd. */
const MAX_CHANNELS = 256;

const formatOf = (tag: number, bits: number): SampleFormat | null => {
  if (tag === WAVE_FORMAT_PCM) return bits === 8 ? 'pcm8' : bits === 16 ? 'pcm16' : bits === 24 ? 'pcm24' : bits === 32 ? 'pcm32' : null;
  if (tag === WAVE_FORMAT_IEEE_FLOAT) return bits === 32 ? 'float32' : bits === 64 ? 'float64' : null;
  return null;
};

export const bytesPerSample = (f: SampleFormat): number => ({ pcm8: 1, pcm16: 2, pcm24: 3, pcm32: 4, float32: 4, float64: 8 })[f];

function readExact(src: ByteSource, at: number, n: number, field: string): DataView {
  const buf = new Uint8Array(n);
  const got = src.read(buf, 0, n, at);
  if (got < n) {
    throw new BadInputError({ file: src.name, field, offset: at }, `truncated: needs ${n} bytes, the file has ${Math.max(0, src.size - at)}`);
  }
  return new DataView(buf.buffer);
}

const fourcc = (v: DataView, at: number): string => String.fromCharCode(v.getUint8(at), v.getUint8(at + 1), v.getUint8(at + 2), v.getUint8(at + 3));

/** Parses the header chunks and locates the sample data. Reads only headers, never the samples. */
export function readWavInfo(src: ByteSource): WavInfo {
  const file = src.name;
  const riff = readExact(src, 0, 12, 'RIFF header');
  const id = fourcc(riff, 0);
  if (id !== 'RIFF') {
    throw new BadInputError(
      { file, field: 'RIFF header', offset: 0 },
      id === 'RIFX' || id === 'RF64' ? `${id} files are not supported` : `not a RIFF file (starts with ${JSON.stringify(id)})`,
    );
  }
  if (fourcc(riff, 8) !== 'WAVE')
    throw new BadInputError({ file, field: 'RIFF form type', offset: 8 }, `not a WAVE file (form type ${JSON.stringify(fourcc(riff, 8))})`);

  let fmt: { tag: number; channels: number; rate: number; blockAlign: number; bits: number; extensible: boolean; format: SampleFormat } | null = null;
  let pos = 12;
  while (pos < src.size) {
    const h = readExact(src, pos, 8, 'chunk header');
    const cid = fourcc(h, 0);
    const size = h.getUint32(4, true);
    const body = pos + 8;
    if (!/^[\x20-\x7e]{4}$/.test(cid)) throw new BadInputError({ file, field: 'chunk id', offset: pos }, `invalid chunk id ${JSON.stringify(cid)}`);
    if (cid === 'fmt ') {
      if (fmt !== null) throw new BadInputError({ file, field: 'fmt chunk', offset: pos }, 'a second fmt chunk');
      if (size < 16) throw new BadInputError({ file, field: 'fmt chunk size', offset: pos + 4 }, `${size} bytes is shorter than the 16 a fmt chunk needs`);
      if (body + size > src.size) throw new BadInputError({ file, field: 'fmt chunk size', offset: pos + 4 }, `${size} bytes runs past the end of the file`);
      const f = readExact(src, body, Math.min(size, 40), 'fmt chunk');
      const tag = f.getUint16(0, true);
      const channels = f.getUint16(2, true);
      const rate = f.getUint32(4, true);
      const blockAlign = f.getUint16(12, true);
      const bits = f.getUint16(14, true);
      let subTag = tag;
      let extensible = false;
      if (tag === WAVE_FORMAT_EXTENSIBLE) {
        extensible = true;
        if (size < 40) throw new BadInputError({ file, field: 'fmt chunk size', offset: pos + 4 }, `WAVE_FORMAT_EXTENSIBLE needs 40 bytes, got ${size}`);
        const cb = f.getUint16(16, true);
        if (cb < 22) throw new BadInputError({ file, field: 'fmt.cbSize', offset: body + 16 }, `WAVE_FORMAT_EXTENSIBLE needs cbSize 22, got ${cb}`);
        const valid = f.getUint16(18, true);
        if (valid > bits)
          throw new BadInputError({ file, field: 'fmt.validBitsPerSample', offset: body + 18 }, `${valid} valid bits exceeds ${bits} bits per sample`);
        subTag = f.getUint16(24, true);
        for (let i = 0; i < GUID_TAIL.length; i++) {
          if (f.getUint8(26 + i) !== GUID_TAIL[i]) throw new BadInputError({ file, field: 'fmt.subFormat', offset: body + 24 }, 'unknown sub-format GUID');
        }
      }
      if (subTag !== WAVE_FORMAT_PCM && subTag !== WAVE_FORMAT_IEEE_FLOAT) {
        throw new BadInputError(
          { file, field: tag === WAVE_FORMAT_EXTENSIBLE ? 'fmt.subFormat' : 'fmt.audioFormat', offset: body + (tag === WAVE_FORMAT_EXTENSIBLE ? 24 : 0) },
          `unsupported format tag 0x${subTag.toString(16)} (PCM and IEEE float only)`,
        );
      }
      if (channels === 0) throw new BadInputError({ file, field: 'fmt.channels', offset: body + 2 }, 'zero channels');
      if (channels > MAX_CHANNELS)
        throw new BadInputError({ file, field: 'fmt.channels', offset: body + 2 }, `${channels} channels is more than ${MAX_CHANNELS}`);
      if (rate < WAV_MIN_HZ || rate > WAV_MAX_HZ) {
        throw new BadInputError({ file, field: 'fmt.sampleRate', offset: body + 4 }, `sample rate ${rate} Hz is outside ${WAV_MIN_HZ}–${WAV_MAX_HZ} Hz`);
      }
      const format = formatOf(subTag, bits);
      if (format === null)
        throw new BadInputError(
          { file, field: 'fmt.bitsPerSample', offset: body + 14 },
          `${bits} bits is not supported for ${subTag === WAVE_FORMAT_PCM ? 'PCM' : 'float'}`,
        );
      if (blockAlign !== channels * bytesPerSample(format)) {
        throw new BadInputError(
          { file, field: 'fmt.blockAlign', offset: body + 12 },
          `block align ${blockAlign} does not match ${channels} channel(s) × ${bits} bits`,
        );
      }
      fmt = { tag, channels, rate, blockAlign, bits, extensible, format };
    } else if (cid === 'data') {
      if (fmt === null) throw new BadInputError({ file, field: 'data chunk', offset: pos }, 'data chunk before the fmt chunk');
      if (body + size > src.size) {
        throw new BadInputError(
          { file, field: 'data chunk size', offset: pos + 4 },
          `data chunk of ${size} bytes is longer than the file (${src.size - body} bytes follow)`,
        );
      }
      if (size % fmt.blockAlign !== 0) {
        throw new BadInputError({ file, field: 'data chunk size', offset: pos + 4 }, `${size} bytes is not a whole number of ${fmt.blockAlign}-byte frames`);
      }
      return {
        sampleRate: fmt.rate,
        channels: fmt.channels,
        format: fmt.format,
        extensible: fmt.extensible,
        frames: size / fmt.blockAlign,
        dataOffset: body,
        dataBytes: size,
        blockAlign: fmt.blockAlign,
      };
    } else if (body + size > src.size) {
      throw new BadInputError({ file, field: `${cid.trim()} chunk size`, offset: pos + 4 }, `chunk of ${size} bytes runs past the end of the file`);
    }
    pos = body + size + (size % 2); // chunks are padded to even sizes
  }
  throw new BadInputError({ file, field: fmt === null ? 'fmt chunk' : 'data chunk', offset: pos }, `no ${fmt === null ? 'fmt' : 'data'} chunk`);
}

/**
 * Streams sample frames from a WAV source. `read` converts to f32 in [-1, 1); `readMono`
 * downmixes by averaging the channels (the model's input is mono). One buffer is allocated when
 * the reader is made; reads allocate nothing. Non-finite float samples are refused.
 */
export class WavReader {
  readonly info: WavInfo;
  readonly #src: ByteSource;
  readonly #buf: Uint8Array;
  readonly #view: DataView;
  #frame = 0;

  constructor(src: ByteSource, bufferFrames = 4096) {
    this.#src = src;
    this.info = readWavInfo(src);
    this.#buf = new Uint8Array(bufferFrames * this.info.blockAlign);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Frames left to read. */
  get remaining(): number {
    return this.info.frames - this.#frame;
  }

  /** Reads up to `out.length / channels` frames, interleaved. Returns frames read (0 at the end). */
  read(out: Float32Array, maxFrames = Math.floor(out.length / this.info.channels)): number {
    return this.#read(out, maxFrames, false);
  }

  /** Reads up to `out.length` frames, averaged to mono. Returns frames read. */
  readMono(out: Float32Array, maxFrames = out.length): number {
    return this.#read(out, maxFrames, true);
  }

  #read(out: Float32Array, maxFrames: number, mono: boolean): number {
    const { channels, blockAlign, format } = this.info;
    const want = Math.min(maxFrames, this.remaining);
    const bps = bytesPerSample(format);
    const chunkFrames = this.#buf.length / blockAlign;
    let done = 0;
    while (done < want) {
      const n = Math.min(chunkFrames, want - done);
      const at = this.info.dataOffset + (this.#frame + done) * blockAlign;
      const got = this.#src.read(this.#buf, 0, n * blockAlign, at);
      if (got < n * blockAlign)
        throw new BadInputError(
          { file: this.#src.name, field: 'data', offset: at + got },
          'the file ended inside the data chunk (was it truncated while reading?)',
        );
      const v = this.#view;
      for (let f = 0; f < n; f++) {
        let sum = 0;
        for (let c = 0; c < channels; c++) {
          const o = f * blockAlign + c * bps;
          let s: number;
          switch (format) {
            case 'pcm8':
              s = (v.getUint8(o) - 128) / 128;
              break;
            case 'pcm16':
              s = v.getInt16(o, true) / 32768;
              break;
            case 'pcm24':
              s = (v.getUint8(o) | (v.getUint8(o + 1) << 8) | (v.getInt8(o + 2) << 16) | 0) / 8388608;
              break;
            case 'pcm32':
              s = v.getInt32(o, true) / 2147483648;
              break;
            case 'float32':
              s = v.getFloat32(o, true);
              break;
            default:
              s = v.getFloat64(o, true);
          }
          if (!(Math.abs(s) <= F32_MAX)) {
            const why = Number.isFinite(s) ? ' (beyond the 32-bit float range the pipeline computes in)' : '';
            throw new BadInputError(
              { file: this.#src.name, field: 'data', offset: at + o },
              `sample is ${s}${why} (frame ${this.#frame + done + f}, channel ${c})`,
            );
          }
          if (mono) sum += s;
          else out[(done + f) * channels + c] = s;
        }
        if (mono) out[done + f] = sum / channels;
      }
      done += n;
    }
    this.#frame += done;
    return done;
  }
}

/** Reads a whole source as mono f32 (allocates the result; for files of known, modest size). */
export function readWavMono(src: ByteSource): { info: WavInfo; samples: Float32Array } {
  const r = new WavReader(src);
  const samples = new Float32Array(r.info.frames);
  r.readMono(samples);
  return { info: r.info, samples };
}

/** The 44- or 68-byte header for `frames` frames of `format`. */
export function wavHeader(f: WavFormat, frames: number): Uint8Array {
  const bps = bytesPerSample(f.format);
  const blockAlign = f.channels * bps;
  const dataBytes = frames * blockAlign;
  const isFloat = f.format === 'float32' || f.format === 'float64';
  // Non-PCM formats carry the cbSize field (0): an 18-byte fmt chunk.
  const fmtSize = f.extensible ? 40 : isFloat ? 18 : 16;
  const headerBytes = 12 + 8 + fmtSize + 8;
  const out = new Uint8Array(headerBytes);
  const v = new DataView(out.buffer);
  const put = (at: number, s: string) => {
    for (let i = 0; i < 4; i++) v.setUint8(at + i, s.charCodeAt(i));
  };
  put(0, 'RIFF');
  v.setUint32(4, headerBytes - 8 + dataBytes + (dataBytes % 2), true);
  put(8, 'WAVE');
  put(12, 'fmt ');
  v.setUint32(16, fmtSize, true);
  v.setUint16(20, f.extensible ? WAVE_FORMAT_EXTENSIBLE : isFloat ? WAVE_FORMAT_IEEE_FLOAT : WAVE_FORMAT_PCM, true);
  v.setUint16(22, f.channels, true);
  v.setUint32(24, f.sampleRate, true);
  v.setUint32(28, f.sampleRate * blockAlign, true);
  v.setUint16(32, blockAlign, true);
  v.setUint16(34, bps * 8, true);
  if (f.extensible) {
    v.setUint16(36, 22, true);
    v.setUint16(38, bps * 8, true);
    v.setUint32(40, f.channels <= 2 ? (f.channels === 1 ? 0x4 : 0x3) : 0, true);
    v.setUint16(44, isFloat ? WAVE_FORMAT_IEEE_FLOAT : WAVE_FORMAT_PCM, true);
    for (let i = 0; i < GUID_TAIL.length; i++) v.setUint8(46 + i, GUID_TAIL[i] as number);
  }
  put(headerBytes - 8, 'data');
  v.setUint32(headerBytes - 4, dataBytes, true);
  return out;
}

/**
 * Encodes interleaved f32 samples into `out` (which must hold frames × blockAlign bytes).
 * Integer formats clip to [-1, 1) and round to nearest.
 */
export function encodeSamples(format: SampleFormat, samples: Float32Array, out: Uint8Array): number {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const bps = bytesPerSample(format);
  const clip = (x: number, scale: number) => Math.max(-scale, Math.min(scale - 1, Math.round(x * scale)));
  for (let i = 0; i < samples.length; i++) {
    const x = samples[i] as number;
    const o = i * bps;
    switch (format) {
      case 'pcm8':
        v.setUint8(o, clip(x, 128) + 128);
        break;
      case 'pcm16':
        v.setInt16(o, clip(x, 32768), true);
        break;
      case 'pcm24': {
        const s = clip(x, 8388608);
        v.setUint8(o, s & 0xff);
        v.setUint8(o + 1, (s >> 8) & 0xff);
        v.setUint8(o + 2, (s >> 16) & 0xff);
        break;
      }
      case 'pcm32':
        v.setInt32(o, clip(x, 2147483648), true);
        break;
      case 'float32':
        v.setFloat32(o, x, true);
        break;
      default:
        v.setFloat64(o, x, true);
    }
  }
  return samples.length * bps;
}

/** A whole WAV file in memory. */
export function encodeWav(f: WavFormat, interleaved: Float32Array): Uint8Array {
  if (interleaved.length % f.channels !== 0)
    throw new BadInputError({ field: 'samples' }, `${interleaved.length} samples is not a whole number of ${f.channels}-channel frames`);
  const frames = interleaved.length / f.channels;
  const header = wavHeader(f, frames);
  const dataBytes = interleaved.length * bytesPerSample(f.format);
  const out = new Uint8Array(header.length + dataBytes + (dataBytes % 2));
  out.set(header);
  encodeSamples(f.format, interleaved, out.subarray(header.length, header.length + dataBytes));
  return out;
}
