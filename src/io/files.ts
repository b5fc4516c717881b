/** Files at the edge: byte sources and sinks for the pure codecs in dsp/. */
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { BadInputError, UsageError } from '../errors.js';
import type { ByteSource } from '../bytes.js';
import type { WavFormat } from '../dsp/wav.js';
import { bytesPerSample, encodeSamples, WavReader, wavHeader } from '../dsp/wav.js';

/** Largest text file read whole (configurations, tokenizers, interval CSVs). */
export const MAX_TEXT_BYTES = 64 << 20;

/**
 * A whole text file of at most `maxBytes`; a folder, a device, a file too large or an
 * unreadable one is bad input naming the file (so `/dev/zero` is refused, not read forever).
 */
export function readTextFile(file: string, what: string, maxBytes = MAX_TEXT_BYTES): string {
  let st: Stats;
  try {
    st = statSync(file);
  } catch (cause) {
    throw new BadInputError({ file }, `cannot read the ${what} (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
  }
  if (st.isDirectory()) throw new BadInputError({ file }, `the ${what} is a folder, not a file`);
  if (!st.isFile()) throw new BadInputError({ file }, `the ${what} is not a regular file`);
  if (st.size > maxBytes) throw new BadInputError({ file }, `the ${what} is ${st.size} bytes; the limit is ${maxBytes}`);
  try {
    return readFileSync(file, 'utf8');
  } catch (cause) {
    throw new BadInputError({ file }, `cannot read the ${what} (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
  }
}

/**
 * Opens a file as a ByteSource. Call close() when done. A folder is refused by name; a FIFO is
 * read as it comes (like `cat`, it waits for a writer).
 */
export function openFileSource(path: string): ByteSource & { close(): void } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    throw new BadInputError({ file: path }, code === 'EISDIR' ? 'is a folder, not a file' : `cannot open (${code ?? 'error'})`, { cause });
  }
  const st = fstatSync(fd);
  if (st.isDirectory()) {
    closeSync(fd);
    throw new BadInputError({ file: path }, 'is a folder, not a file');
  }
  const size = st.size;
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

/** Where a path leads: its real path when it exists (links followed), else its absolute path. */
function identity(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * Refuses, before anything is opened for writing, an output that is an input or another
 * output (links and relative paths resolved).
 */
export function checkOutputs(inputs: readonly [flag: string, path: string][], outputs: readonly [flag: string, path: string][]): void {
  const seen = new Map<string, string>();
  for (const [flag, f] of inputs) seen.set(identity(f), `${flag} '${f}'`);
  for (const [flag, f] of outputs) {
    const id = identity(f);
    const other = seen.get(id);
    if (other !== undefined) throw new UsageError(`${flag} '${f}' is also ${other}: refusing to overwrite it`);
    seen.set(id, `${flag} '${f}'`);
  }
}

/** A temporary name beside `file`, renamed into place only when everything succeeded. */
export function stagingName(file: string): string {
  return join(dirname(file), `.${basename(file)}.${process.pid}.partial`);
}

/** An output file can be made: its folder exists, and it is not a folder or a device. */
export function checkWritable(file: string, flag = '--out'): void {
  const dir = dirname(resolve(file));
  let d: Stats;
  try {
    d = statSync(dir);
  } catch {
    throw new BadInputError({ file, field: flag }, `its folder ${dir} does not exist`);
  }
  if (!d.isDirectory()) throw new BadInputError({ file, field: flag }, `${dir} is not a folder`);
  if (!existsSync(file)) return;
  const st = statSync(file);
  if (st.isDirectory()) throw new BadInputError({ file, field: flag }, 'is a folder; give a file name');
  if (!st.isFile()) throw new BadInputError({ file, field: flag }, 'exists and is not a regular file (a device or a pipe); give a file name');
}

/**
 * Makes `file` through `write(tmp)` on a temporary name beside it, renamed into place only if
 * `write` succeeds: a failure leaves neither a partial file nor a damaged old one. Write
 * errors (a full disk, no permission) are bad input naming the file.
 */
export function staged<T>(file: string, flag: string, write: (tmp: string) => T): T {
  checkWritable(file, flag);
  const tmp = stagingName(file);
  try {
    const value = write(tmp);
    renameSync(tmp, file);
    return value;
  } catch (error) {
    rmSync(tmp, { force: true, recursive: true });
    const code = (error as NodeJS.ErrnoException).code;
    // System errors (ENOSPC, EACCES, …) name the output; voxslab's own errors pass as they are.
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) throw new BadInputError({ file, field: flag }, `cannot write it (${code})`, { cause: error });
    throw error;
  }
}

/** Writes `data` to `file` whole, through a temporary name (see `staged`). */
export function writeWhole(file: string, data: string | Uint8Array, flag = '--out'): void {
  staged(file, flag, (tmp) => writeFileSync(tmp, data));
}

/** Makes a folder of outputs through a temporary folder beside it, renamed into place on success. */
export async function stagedFolder<T>(dir: string, flag: string, write: (tmp: string) => Promise<T>): Promise<T> {
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new BadInputError({ file: dir, field: flag }, 'exists and is not a folder');
    if (readdirSync(dir).length > 0) throw new BadInputError({ file: dir, field: flag }, 'exists and is not empty; give a new folder');
  }
  const parent = dirname(resolve(dir));
  if (!existsSync(parent)) mkdirSync(parent, { recursive: true });
  const tmp = stagingName(resolve(dir));
  rmSync(tmp, { force: true, recursive: true });
  mkdirSync(tmp);
  try {
    const value = await write(tmp);
    // An empty output folder given in advance is replaced only now, when the new one is whole.
    if (existsSync(dir)) rmSync(dir, { recursive: true });
    renameSync(tmp, dir);
    return value;
  } catch (error) {
    rmSync(tmp, { force: true, recursive: true });
    throw error;
  }
}
