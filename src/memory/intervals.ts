import { BadInputError } from '../errors.js';
import type { BufferSpec } from './planner.js';

/**
 * Parses a CSV of buffers with the header `id,lower,upper,size`: each buffer is live from op
 * `lower` up to but not including op `upper`, and has `size` bytes. Returns planner specs
 * (inclusive lastUse = upper − 1). A malformed row is a BadInputError naming the file, the
 * line and the column.
 */
export function parseIntervalsCsv(text: string, file: string): BufferSpec[] {
  const lines = text.split(/\r?\n/);
  const header = (lines[0] ?? '').replace(/^\uFEFF/, '').trim();
  const columns = header.split(',').map((c) => c.trim());
  const want = ['id', 'lower', 'upper', 'size'];
  if (columns.length !== 4 || columns.some((c, i) => c !== want[i])) {
    throw new BadInputError({ file, field: 'line 1' }, `header must be 'id,lower,upper,size', got '${header}'`);
  }
  const out: BufferSpec[] = [];
  const seen = new Map<string, number>();
  for (let i = 1; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line === '' || line.startsWith('#')) continue;
    const at = `line ${i + 1}`;
    const cells = line.split(',').map((c) => c.trim());
    if (cells.length !== 4) throw new BadInputError({ file, field: at }, `expected 4 columns, got ${cells.length}`);
    const [id, lower, upper, size] = cells as [string, string, string, string];
    if (id === '') throw new BadInputError({ file, field: `${at} column id` }, 'empty id');
    const prev = seen.get(id);
    if (prev !== undefined) throw new BadInputError({ file, field: `${at} column id` }, `duplicate id '${id}' (first on line ${prev})`);
    seen.set(id, i + 1);
    const num = (text: string, column: string, min: number): number => {
      if (!/^\d+$/.test(text)) throw new BadInputError({ file, field: `${at} column ${column}` }, `'${text}' is not a non-negative integer`);
      const v = Number(text);
      if (!Number.isSafeInteger(v) || v < min) throw new BadInputError({ file, field: `${at} column ${column}` }, `${text} is out of range`);
      return v;
    };
    const lo = num(lower, 'lower', 0);
    const hi = num(upper, 'upper', 0);
    const bytes = num(size, 'size', 0);
    if (hi <= lo) throw new BadInputError({ file, field: `${at} column upper` }, `upper ${hi} must be greater than lower ${lo} (half-open interval)`);
    out.push({ name: id, bytes, firstUse: lo, lastUse: hi - 1 });
  }
  if (out.length === 0) throw new BadInputError({ file }, 'no buffers after the header');
  return out;
}
