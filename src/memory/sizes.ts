import { ArgumentError, BadInputError } from '../errors.js';

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  tib: 1024 ** 4,
  kb: 1000,
  mb: 1000 ** 2,
  gb: 1000 ** 3,
  tb: 1000 ** 4,
};

/**
 * Parses a memory size: plain bytes (`1048576`) or a number with a unit
 * (`512MiB`, `2GiB`, `1.5GB`; binary units are powers of 1024, decimal of 1000).
 * The result must be a whole number of bytes no larger than Number.MAX_SAFE_INTEGER.
 * `source` names where the text came from, for the error message.
 */
export function parseByteSize(text: string, source = 'size'): number {
  if (typeof text !== 'string') throw new ArgumentError(`${source} must be a string, got ${typeof text}`);
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (m === null) {
    throw new BadInputError({ field: source }, `'${text}' is not a size (use e.g. 512MiB, 2GiB or plain bytes)`);
  }
  const unit = UNITS[(m[2] ?? '').toLowerCase()];
  if (unit === undefined) {
    throw new BadInputError({ field: source }, `unknown unit '${m[2]}' in '${text}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)`);
  }
  const value = Number(m[1]) * unit;
  if (!Number.isSafeInteger(value)) {
    throw new BadInputError({ field: source }, `'${text}' is not a whole number of bytes within 2^53-1`);
  }
  return value;
}

/** Human-readable size with binary units, e.g. `1.50 MiB`. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return String(bytes);
  const abs = Math.abs(bytes);
  if (abs < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes / 1024;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(2)} ${units[i]}`;
}
