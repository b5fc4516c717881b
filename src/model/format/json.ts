/**
 * Bounds on a JSON document, checked over its bytes before anything is built from it: a file
 * from disk cannot make the parser nest a million levels, hold a 50 MB string or a hundred
 * million values (each a V8 heap allocation that ends the process when it fails). Pure
 * computation; one pass, no allocation.
 */
import { BadInputError } from '../../errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects. */
  readonly depth: number;
  /** Longest string, in bytes as written (escapes counted as written). */
  readonly stringBytes: number;
  /** Most values (strings, numbers, literals, arrays and objects) in the document. */
  readonly values: number;
}

/** A checkpoint's or a configuration's `config.json`: a few kilobytes in every real checkpoint. */
export const CONFIG_JSON: JsonLimits = Object.freeze({ depth: 16, stringBytes: 64 << 10, values: 100_000 });
/** `tokenizer.json` and `tokenizer_config.json`: vocabularies and merges of a few hundred thousand entries. */
export const TOKENIZER_JSON: JsonLimits = Object.freeze({ depth: 32, stringBytes: 1 << 20, values: 8_000_000 });
/** A safetensors header: tensor entries (name, dtype, shape, offsets) and string metadata. */
export const HEADER_JSON: JsonLimits = Object.freeze({ depth: 4, stringBytes: 64 << 10, values: 4_000_000 });

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;

/**
 * Throws BadInputError naming `file` (and `field`) at the first byte past a limit. Malformed
 * JSON is left to the parser, which reports it; this only refuses what is too big to parse.
 * Offsets in messages are `base` plus the byte's index (the document's place in its file).
 */
export function checkJsonBounds(bytes: Uint8Array, limits: JsonLimits, file: string, field?: string, base = 0): void {
  const where = (at: number) => (field === undefined ? { file, offset: base + at } : { file, field, offset: base + at });
  let depth = 0;
  let values = 0;
  let stringStart = -1; // offset of the open quote while inside a string
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i] as number;
    if (stringStart >= 0) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) stringStart = -1;
      else if (i - stringStart > limits.stringBytes) throw new BadInputError(where(stringStart), `a string longer than ${limits.stringBytes} bytes`);
      continue;
    }
    if (b === QUOTE) {
      stringStart = i;
      values++;
    } else if (b === OPEN_ARRAY || b === OPEN_OBJECT) {
      if (++depth > limits.depth) throw new BadInputError(where(i), `nested deeper than ${limits.depth} levels`);
      values++;
    } else if (b === CLOSE_ARRAY || b === CLOSE_OBJECT) depth--;
    else if (b === COMMA) values++;
    if (values > limits.values) throw new BadInputError(where(i), `more than ${limits.values} values`);
  }
}

/** `bytes` (UTF-8 JSON) parsed after its bounds are checked; invalid JSON is bad input naming the file. */
export function parseBoundedJson(bytes: Uint8Array, limits: JsonLimits, file: string, field?: string, base = 0): unknown {
  checkJsonBounds(bytes, limits, file, field, base);
  const where = field === undefined ? { file } : { file, field, offset: base };
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch (cause) {
    throw new BadInputError(where, 'not valid UTF-8', { cause });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (cause) {
    throw new BadInputError(where, `not valid JSON: ${(cause as Error).message}`, { cause });
  }
}
