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
 * A whole file's bytes, at most `maxBytes`; a folder, a device, a file too large or an
 * unreadable one is bad input naming the file (so `/dev/zero` is refused, not read forever).
 */
export function readFileBytes(file: string, what: string, maxBytes: number): Buffer {
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
    return readFileSync(file);
  } catch (cause) {
    throw new BadInputError({ file }, `cannot read the ${what} (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, { cause });
  }
}

/** A whole text file of at most `maxBytes` (see readFileBytes). */
export function readTextFile(file: string, what: string, maxBytes = MAX_TEXT_BYTES): string {
  return readFileBytes(file, what, maxBytes).toString('utf8');
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

/** Why an output could not be written, in words, from the system's error code. */
const WRITE_REASONS: Readonly<Record<string, string>> = Object.freeze({
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EROFS: 'the file system is read-only',
  ENOSPC: 'no space left on the device',
  EDQUOT: 'the disk quota is exhausted',
  EFBIG: 'the file would be too large for the file system',
  ENAMETOOLONG: 'the name is too long',
  ENOTDIR: 'a part of the path is not a folder',
  EISDIR: 'it is a folder',
  EEXIST: 'it exists and is not a folder',
  ENOENT: 'a folder on the path does not exist, or files cannot be made there',
  EIO: 'an input/output error on the device',
  ELOOP: 'too many symbolic links on the path',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files',
  EXDEV: 'its temporary file is on another file system',
});

/**
 * A system error writing an output as bad input naming the path the user gave (`file`) and its
 * flag, never a temporary name; voxslab's own errors pass as they are.
 */
export function outputError(error: unknown, file: string, flag: string): unknown {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string' || !/^E[A-Z]+$/.test(code)) return error;
  return new BadInputError({ file, field: flag }, `cannot write it: ${WRITE_REASONS[code] ?? 'the system refused'} (${code})`, { cause: error });
}

/** Longest file name (bytes) and path (bytes) Linux accepts: NAME_MAX and PATH_MAX less the NUL. */
const NAME_MAX = 255;
const PATH_MAX = 4095;

/**
 * Makes `dir` and the folders above it that are missing, one at a time (Node's recursive mkdir
 * never returns on some paths, e.g. under /proc). Errors name `shown` and its flag.
 */
export function makeFolders(dir: string, shown = dir, flag = '--out'): void {
  const abs = resolve(dir);
  const missing: string[] = [];
  for (let d = abs; ; d = dirname(d)) {
    let st: Stats | null = null;
    try {
      st = statSync(d);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') throw outputError(error, shown, flag);
    }
    if (st !== null) {
      if (!st.isDirectory()) throw new BadInputError({ file: shown, field: flag }, `${d} is not a folder`);
      break;
    }
    missing.push(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw outputError(error, shown, flag);
    }
  }
}

export class WavFileWriter {
  readonly path: string;
  readonly format: WavFormat;
  /** The name errors give: the output the user asked for, when `path` is its temporary name. */
  readonly #shown: string;
  readonly #flag: string;
  readonly #fd: number;
  readonly #buf: Uint8Array;
  #frames = 0;
  #headerBytes: number;

  /** `shown` and `flag`: what errors name, the output the user asked for when `path` is its temporary name. */
  constructor(path: string, format: WavFormat, o: { bufferFrames?: number; shown?: string; flag?: string } = {}) {
    const bufferFrames = o.bufferFrames ?? 4096;
    const shown = o.shown ?? path;
    const flag = o.flag ?? '--out';
    this.path = path;
    this.format = format;
    this.#shown = shown;
    this.#flag = flag;
    try {
      this.#fd = openSync(path, 'w');
    } catch (cause) {
      throw outputError(cause, shown, flag);
    }
    const header = wavHeader(format, 0);
    this.#headerBytes = header.length;
    this.#write(header, header.length, null);
    this.#buf = new Uint8Array(bufferFrames * format.channels * bytesPerSample(format.format));
  }

  #write(bytes: Uint8Array, n: number, at: number | null): void {
    try {
      writeSync(this.#fd, bytes, 0, n, at);
    } catch (cause) {
      throw outputError(cause, this.#shown, this.#flag);
    }
  }

  /** Appends interleaved samples (a whole number of frames). A full disk is bad input naming the output. */
  write(interleaved: Float32Array): void {
    const ch = this.format.channels;
    const per = this.#buf.length / bytesPerSample(this.format.format);
    for (let i = 0; i < interleaved.length; i += per) {
      const part = interleaved.subarray(i, Math.min(interleaved.length, i + per));
      const n = encodeSamples(this.format.format, part, this.#buf);
      this.#write(this.#buf, n, null);
    }
    this.#frames += interleaved.length / ch;
  }

  close(): void {
    try {
      const dataBytes = this.#frames * this.format.channels * bytesPerSample(this.format.format);
      if (dataBytes % 2 === 1) this.#write(new Uint8Array(1), 1, null);
      this.#write(wavHeader(this.format, this.#frames), this.#headerBytes, 0);
    } finally {
      closeSync(this.#fd);
    }
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

/**
 * A temporary name beside `file`, renamed into place only when everything succeeded. A long name
 * is shortened so that the temporary one fits the file system's limit as the output's does.
 */
export function stagingName(file: string): string {
  const tail = `.${process.pid}.partial`;
  let base = basename(file);
  while (Buffer.byteLength(`.${base}${tail}`) > NAME_MAX) base = base.slice(0, -1);
  return join(dirname(file), `.${base}${tail}`);
}

/** A name the file system can hold: each part at most NAME_MAX bytes, the whole at most PATH_MAX. */
function checkName(file: string, flag: string): void {
  const abs = resolve(file);
  if (Buffer.byteLength(abs) > PATH_MAX)
    throw new BadInputError({ file, field: flag }, `the path is too long (${Buffer.byteLength(abs)} bytes; the limit is ${PATH_MAX})`);
  for (const part of abs.split('/')) {
    if (Buffer.byteLength(part) > NAME_MAX) {
      throw new BadInputError(
        { file, field: flag },
        `the name '${part.slice(0, 24)}…' is too long (${Buffer.byteLength(part)} bytes; the limit is ${NAME_MAX})`,
      );
    }
  }
}

/** An output file can be made: its name fits, its folder exists, and it is not a folder or a device. */
export function checkWritable(file: string, flag = '--out'): void {
  checkName(file, flag);
  const dir = dirname(resolve(file));
  let d: Stats;
  try {
    d = statSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new BadInputError({ file, field: flag }, `its folder ${dir} does not exist`);
    throw outputError(error, file, flag);
  }
  if (!d.isDirectory()) throw new BadInputError({ file, field: flag }, `${dir} is not a folder`);
  let st: Stats;
  try {
    st = statSync(file);
  } catch {
    return;
  }
  if (st.isDirectory()) throw new BadInputError({ file, field: flag }, 'is a folder; give a file name');
  if (!st.isFile()) throw new BadInputError({ file, field: flag }, 'exists and is not a regular file (a device or a pipe); give a file name');
}

/** An output folder can be made: its name fits, and it is a new or empty folder. */
export function checkFolderWritable(dir: string, flag: string): void {
  checkName(dir, flag);
  let st: Stats;
  try {
    st = statSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw outputError(error, dir, flag);
  }
  if (!st.isDirectory()) throw new BadInputError({ file: dir, field: flag }, 'exists and is not a folder');
  if (readdirSync(dir).length > 0) throw new BadInputError({ file: dir, field: flag }, 'exists and is not empty; give a new folder');
}

/** Moves a finished temporary output into place; errors name the output. */
export function commitStaged(tmp: string, file: string, flag: string): void {
  try {
    renameSync(tmp, file);
  } catch (error) {
    rmSync(tmp, { force: true, recursive: true });
    throw outputError(error, file, flag);
  }
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
    throw outputError(error, file, flag);
  }
}

/** Writes `data` to `file` whole, through a temporary name (see `staged`). */
export function writeWhole(file: string, data: string | Uint8Array, flag = '--out'): void {
  staged(file, flag, (tmp) => writeFileSync(tmp, data));
}

/** Makes a folder of outputs through a temporary folder beside it, renamed into place on success. */
export async function stagedFolder<T>(dir: string, flag: string, write: (tmp: string) => Promise<T> | T): Promise<T> {
  checkFolderWritable(dir, flag);
  makeFolders(dirname(resolve(dir)), dir, flag);
  const tmp = stagingName(resolve(dir));
  try {
    rmSync(tmp, { force: true, recursive: true });
    mkdirSync(tmp);
  } catch (error) {
    throw outputError(error, dir, flag);
  }
  try {
    const value = await write(tmp);
    // An empty output folder given in advance is replaced only now, when the new one is whole.
    if (existsSync(dir)) rmSync(dir, { recursive: true });
    renameSync(tmp, dir);
    return value;
  } catch (error) {
    rmSync(tmp, { force: true, recursive: true });
    throw outputError(error, dir, flag);
  }
}
