/**
 * The float initializers of an ONNX model's main graph: enough of the protobuf wire format to
 * find `ModelProto.graph` (field 7), its `initializer`s (GraphProto field 5) and, in each
 * TensorProto, `dims` (1), `data_type` (2), `name` (8) and the values in `raw_data` (9) or
 * `float_data` (4). Nodes and subgraphs are skipped; every length is checked against the bytes,
 * so a truncated or corrupt file is refused by offset instead of read past.
 */
import { BadInputError } from '../errors.js';

export interface OnnxTensor {
  readonly name: string;
  readonly dims: readonly number[];
  /** The values, little-endian f32 (data_type 1). */
  readonly data: Float32Array;
}

const FLOAT = 1;

class Reader {
  at: number;
  constructor(
    readonly bytes: Uint8Array,
    readonly file: string,
    at: number,
    readonly end: number,
  ) {
    this.at = at;
  }

  fail(reason: string): never {
    throw new BadInputError({ file: this.file, offset: this.at }, reason);
  }

  varint(): number {
    let v = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) this.fail('the file ends inside a number (not an ONNX model, or truncated)');
      const b = this.bytes[this.at++] as number;
      v += (b & 0x7f) * scale;
      if (b < 0x80) {
        if (!Number.isSafeInteger(v)) this.fail('a number is too large');
        return v;
      }
      scale *= 128;
    }
    this.fail('a number runs over ten bytes');
  }

  /** The next field: its number, wire type and, for length-delimited ones, the value's bounds. */
  field(): { n: number; wire: number; from: number; to: number; value: number } {
    const key = this.varint();
    const n = Math.floor(key / 8);
    const wire = key % 8;
    const from = this.at;
    if (wire === 0) return { n, wire, from, to: from, value: this.varint() };
    const size = wire === 1 ? 8 : wire === 5 ? 4 : wire === 2 ? this.varint() : -1;
    if (size < 0) this.fail(`field ${n} has wire type ${wire}, which ONNX does not use`);
    const start = this.at;
    if (start + size > this.end) this.fail(`field ${n} runs ${start + size - this.end} bytes past its message (truncated file?)`);
    this.at = start + size;
    return { n, wire, from: start, to: start + size, value: 0 };
  }
}

function readTensor(bytes: Uint8Array, file: string, from: number, to: number): OnnxTensor {
  const r = new Reader(bytes, file, from, to);
  let name = '';
  let type = 0;
  const dims: number[] = [];
  let raw: [number, number] | null = null;
  const floats: number[] = [];
  while (r.at < to) {
    const f = r.field();
    if (f.n === 1) {
      if (f.wire === 0) dims.push(f.value);
      else if (f.wire === 2) {
        const d = new Reader(bytes, file, f.from, f.to);
        while (d.at < f.to) dims.push(d.varint());
      }
    } else if (f.n === 2 && f.wire === 0) type = f.value;
    else if (f.n === 8 && f.wire === 2) name = new TextDecoder().decode(bytes.subarray(f.from, f.to));
    else if (f.n === 9 && f.wire === 2) raw = [f.from, f.to];
    else if (f.n === 4) {
      const v = new DataView(bytes.buffer, bytes.byteOffset);
      for (let at = f.from; at + 4 <= f.to; at += 4) floats.push(v.getFloat32(at, true));
    }
  }
  const count = dims.reduce((a, b) => a * b, 1);
  if (type !== FLOAT) return { name, dims, data: new Float32Array(0) };
  let data: Float32Array;
  if (raw !== null) {
    if (raw[1] - raw[0] !== 4 * count) {
      throw new BadInputError(
        { file, field: `initializer '${name}'`, offset: raw[0] },
        `holds ${raw[1] - raw[0]} bytes, its dims [${dims.join(', ')}] need ${4 * count}`,
      );
    }
    data = new Float32Array(count);
    new Uint8Array(data.buffer).set(bytes.subarray(raw[0], raw[1]));
  } else {
    if (floats.length !== count)
      throw new BadInputError({ file, field: `initializer '${name}'` }, `holds ${floats.length} values, its dims [${dims.join(', ')}] need ${count}`);
    data = Float32Array.from(floats);
  }
  return { name, dims, data };
}

/** The f32 initializers of the model's main graph, by name (others are listed with no data). */
export function onnxInitializers(bytes: Uint8Array, file: string): Map<string, OnnxTensor> {
  const top = new Reader(bytes, file, 0, bytes.length);
  let graph: [number, number] | null = null;
  while (top.at < bytes.length) {
    const f = top.field();
    if (f.n === 7 && f.wire === 2) graph = [f.from, f.to];
  }
  if (graph === null) throw new BadInputError({ file, field: 'graph' }, 'missing: not an ONNX model');
  const out = new Map<string, OnnxTensor>();
  const g = new Reader(bytes, file, graph[0], graph[1]);
  while (g.at < graph[1]) {
    const f = g.field();
    if (f.n === 5 && f.wire === 2) {
      const t = readTensor(bytes, file, f.from, f.to);
      out.set(t.name, t);
    }
  }
  return out;
}
