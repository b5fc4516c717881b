/** NumPy .npy (format 1.0) encoding for float32 and int32 arrays. */
import { ArgumentError } from '../errors.js';

function encodeNpy(data: Float32Array | Int32Array, shape: readonly number[], descr: '<f4' | '<i4'): Uint8Array {
  const count = shape.reduce((a, b) => a * b, 1);
  if (count !== data.length) throw new ArgumentError(`npy: shape [${shape.join(', ')}] holds ${count} values, data has ${data.length}`);
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64, ending in \n.
  const total = Math.ceil((10 + header.length + 1) / 64) * 64;
  header = `${header.padEnd(total - 10 - 1, ' ')}\n`;
  const out = new Uint8Array(total + data.length * 4);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0], 0);
  new DataView(out.buffer).setUint16(8, header.length, true);
  for (let i = 0; i < header.length; i++) out[10 + i] = header.charCodeAt(i);
  const v = new DataView(out.buffer, total);
  if (data instanceof Float32Array) for (let i = 0; i < data.length; i++) v.setFloat32(i * 4, data[i] as number, true);
  else for (let i = 0; i < data.length; i++) v.setInt32(i * 4, data[i] as number, true);
  return out;
}

/** A .npy file holding `data` as little-endian float32 with `shape` (C order). */
export function encodeNpyFloat32(data: Float32Array, shape: readonly number[]): Uint8Array {
  return encodeNpy(data, shape, '<f4');
}

/** A .npy file holding `data` as little-endian int32 with `shape` (C order). */
export function encodeNpyInt32(data: Int32Array, shape: readonly number[]): Uint8Array {
  return encodeNpy(data, shape, '<i4');
}
