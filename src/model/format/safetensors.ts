/**
 * safetensors: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * ({ name: { dtype, shape, data_offsets: [begin, end] }, "__metadata__": { str: str } }), then
 * the data; offsets are relative to the end of the header. The reader validates everything
 * before any tensor is read: header size and UTF-8, JSON types, known dtypes, shapes,
 * offsets inside the data, shape × dtype = byte length, no overlaps, no holes, nothing after.
 * Pure computation over a ByteSource.
 */
import { BadInputError } from '../../errors.js';
import type { ByteSource } from '../../bytes.js';
import { DTYPE_BYTES, type Dtype } from './layout.js';
import { HEADER_JSON, parseBoundedJson } from './json.js';

/** Largest header accepted (the reference implementation's limit). */
export const MAX_HEADER_BYTES = 100_000_000;

export interface TensorEntry {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** Absolute byte offsets in the file. */
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsHeader {
  readonly file: string;
  readonly dataOffset: number;
  readonly tensors: ReadonlyMap<string, TensorEntry>;
  readonly metadata: Readonly<Record<string, string>>;
}

const isDtype = (d: unknown): d is Dtype => typeof d === 'string' && Object.hasOwn(DTYPE_BYTES, d);

export function readSafetensorsHeader(src: ByteSource): SafetensorsHeader {
  const file = src.name;
  if (src.size < 8) throw new BadInputError({ file, field: 'header length', offset: 0 }, `file of ${src.size} bytes is too short for a safetensors header`);
  const lenBuf = new Uint8Array(8);
  src.read(lenBuf, 0, 8, 0);
  const len64 = new DataView(lenBuf.buffer).getBigUint64(0, true);
  if (len64 > BigInt(MAX_HEADER_BYTES))
    throw new BadInputError({ file, field: 'header length', offset: 0 }, `header of ${len64} bytes exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  const n = Number(len64);
  if (n < 2) throw new BadInputError({ file, field: 'header length', offset: 0 }, `header of ${n} bytes cannot hold a JSON object`);
  if (8 + n > src.size)
    throw new BadInputError({ file, field: 'header length', offset: 0 }, `header of ${n} bytes runs past the end of the ${src.size}-byte file`);
  const raw = new Uint8Array(n);
  src.read(raw, 0, n, 8);
  const json = parseBoundedJson(raw, HEADER_JSON, file, 'header', 8);
  if (json === null || typeof json !== 'object' || Array.isArray(json))
    throw new BadInputError({ file, field: 'header', offset: 8 }, 'header is not a JSON object');
  const dataOffset = 8 + n;
  const dataSize = src.size - dataOffset;
  const tensors = new Map<string, TensorEntry>();
  let metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (value === null || typeof value !== 'object' || Array.isArray(value) || Object.values(value).some((v) => typeof v !== 'string')) {
        throw new BadInputError({ file, field: '__metadata__' }, 'metadata must map strings to strings');
      }
      metadata = { ...(value as Record<string, string>) };
      continue;
    }
    const field = `tensor '${name}'`;
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new BadInputError({ file, field }, 'entry is not an object');
    const v = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (!isDtype(v.dtype)) throw new BadInputError({ file, field }, `unsupported dtype ${JSON.stringify(v.dtype)} (F32, F16, BF16, I8, U8, I32, I64)`);
    if (!Array.isArray(v.shape) || v.shape.some((d) => typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0)) {
      throw new BadInputError({ file, field }, `shape ${JSON.stringify(v.shape)} is not a list of non-negative integers`);
    }
    const o = v.data_offsets;
    if (!Array.isArray(o) || o.length !== 2 || o.some((x) => typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0)) {
      throw new BadInputError({ file, field }, `data_offsets ${JSON.stringify(o)} is not a pair of non-negative integers`);
    }
    const [b, e] = o as [number, number];
    if (e < b) throw new BadInputError({ file, field }, `data_offsets [${b}, ${e}] ends before it begins`);
    if (e > dataSize)
      throw new BadInputError({ file, field, offset: dataOffset + b }, `data_offsets [${b}, ${e}] run past the ${dataSize} data bytes in the file`);
    const count = (v.shape as number[]).reduce((x, y) => x * y, 1);
    const want = count * DTYPE_BYTES[v.dtype];
    if (!Number.isSafeInteger(want) || want !== e - b) {
      throw new BadInputError({ file, field }, `shape [${(v.shape as number[]).join(', ')}] of ${v.dtype} needs ${want} bytes, data_offsets give ${e - b}`);
    }
    tensors.set(name, Object.freeze({ name, dtype: v.dtype, shape: Object.freeze([...(v.shape as number[])]), begin: dataOffset + b, end: dataOffset + e }));
  }
  // The data must be covered exactly: no overlaps, no holes, nothing after.
  const sorted = [...tensors.values()].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = dataOffset;
  let prev: TensorEntry | undefined;
  for (const t of sorted) {
    if (t.begin < cursor) throw new BadInputError({ file, field: `tensor '${t.name}'`, offset: t.begin }, `overlaps tensor '${prev?.name}'`);
    if (t.begin > cursor) throw new BadInputError({ file, field: `tensor '${t.name}'`, offset: cursor }, `${t.begin - cursor} unreferenced bytes before it`);
    cursor = t.end;
    prev = t;
  }
  if (cursor !== src.size) throw new BadInputError({ file, field: 'data', offset: cursor }, `${src.size - cursor} bytes after the last tensor`);
  return Object.freeze({ file, dataOffset, tensors, metadata: Object.freeze(metadata) });
}

/** Header bytes for tensors laid out in the given order (offsets assigned contiguously). */
export function encodeSafetensorsHeader(
  tensors: readonly { name: string; dtype: Dtype; shape: readonly number[] }[],
  metadata: Record<string, string> = {},
): { header: Uint8Array; offsets: number[] } {
  const obj: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) obj.__metadata__ = metadata;
  const offsets: number[] = [];
  let at = 0;
  for (const t of tensors) {
    const bytes = t.shape.reduce((x, y) => x * y, 1) * DTYPE_BYTES[t.dtype];
    obj[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + bytes] };
    offsets.push(at);
    at += bytes;
  }
  let json = JSON.stringify(obj);
  // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
  const body = new TextEncoder().encode(json);
  const pad = (8 - (body.length % 8)) % 8;
  json += ' '.repeat(pad);
  const text = new TextEncoder().encode(json);
  const header = new Uint8Array(8 + text.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(text.length), true);
  header.set(text, 8);
  return { header, offsets };
}
