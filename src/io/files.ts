/** Files at the edge: byte sources and sinks for the pure codecs in dsp/. */
import { closeSync, fstatSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { BadInputError } from '../errors.js';
import type { ByteSource } from '../bytes.js';
import type { WavFormat } from '../dsp/wav.js';
import { bytesPerSample, encodeSamples, WavReader, wavHeader } from '../dsp/wav.js';

/** A whole text file; an unreadable one is bad input naming the file and the system's code. */
export function readTextFile(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (cause) {
    throw new BadInputError({ file }, `cannot read the ${what} (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
  }
}

/** Opens a file as a ByteSource. Call close() when done. */
export function openFileSource(path: string): ByteSource & { close(): void } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (cause) {
    throw new BadInputError({ file: path }, `cannot open (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
  }
  const size = fstatSync(fd).size;
  return {
    name: path,
    size,
    read(into, offset, length, position) {
      let done = 0;
      while (done < length) {
        const n = readSync(fd, into, offset + done, length - done, position + done);
        if (n === 0) break;
        done += n;
      }
      return done;
    },
    close() {
      closeSync(fd);
    },
  };
}

/** Streams f32 samples into a WAV file; the header's sizes are written on close(). */
/** A whole WAV file as mono floats (channels averaged), with its rate. Allocates its result. */
export function readMonoWav(file: string): { rate: number; samples: Float32Array } {
  const src = openFileSource(file);
  try {
    const r = new WavReader(src, 4096);
    const all = new Float32Array(r.info.frames);
    let n = 0;
    for (let k = r.readMono(all.subarray(n), 4096); k > 0; k = r.readMono(all.subarray(n), 4096)) n += k;
    return { rate: r.info.sampleRate, samples: all.subarray(0, n) };
  } finally {
    src.close();
  }
}

export class WavFileWriter {
  readonly path: string;
  readonly format: WavFormat;
  readonly #fd: number;
  readonly #buf: Uint8Array;
  #frames = 0;
  #headerBytes: number;

  constructor(path: string, format: WavFormat, bufferFrames = 4096) {
    this.path = path;
    this.format = format;
    try {
      this.#fd = openSync(path, 'w');
    } catch (cause) {
      throw new BadInputError({ file: path }, `cannot create (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
    }
    const header = wavHeader(format, 0);
    this.#headerBytes = header.length;
    writeSync(this.#fd, header);
    this.#buf = new Uint8Array(bufferFrames * format.channels * bytesPerSample(format.format));
  }

  /** Appends interleaved samples (a whole number of frames). */
  write(interleaved: Float32Array): void {
    const ch = this.format.channels;
    const per = this.#buf.length / bytesPerSample(this.format.format);
    for (let i = 0; i < interleaved.length; i += per) {
      const part = interleaved.subarray(i, Math.min(interleaved.length, i + per));
      const n = encodeSamples(this.format.format, part, this.#buf);
      writeSync(this.#fd, this.#buf, 0, n);
    }
    this.#frames += interleaved.length / ch;
  }

  close(): void {
    const dataBytes = this.#frames * this.format.channels * bytesPerSample(this.format.format);
    if (dataBytes % 2 === 1) writeSync(this.#fd, new Uint8Array(1));
    writeSync(this.#fd, wavHeader(this.format, this.#frames), 0, this.#headerBytes, 0);
    closeSync(this.#fd);
  }
}
