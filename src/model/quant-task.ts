/**
 * piscina task: quantize one tensor. Input: its stored bytes and dtype; output: the packed
 * integers, scales and biases. Runs in the pool's worker threads.
 */
import { bf16ToF32, f16ToF32 } from './dtype.js';
import { type Bits, quantize } from './quant.js';

export interface QuantTask {
  bytes: Uint8Array;
  dtype: 'F32' | 'F16' | 'BF16';
  rows: number;
  cols: number;
  bits: Bits;
  group: number;
}

export interface QuantResult {
  data: Uint8Array;
  scales: Float32Array;
  biases: Float32Array;
}

export default function quantizeTask(t: QuantTask): QuantResult {
  const n = t.rows * t.cols;
  const v = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
  const w = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    w[i] = t.dtype === 'F32' ? v.getFloat32(4 * i, true) : t.dtype === 'BF16' ? bf16ToF32(v.getUint16(2 * i, true)) : f16ToF32(v.getUint16(2 * i, true));
  }
  const q = quantize(w, t.rows, t.cols, t.bits, t.group);
  return { data: q.data, scales: q.scales, biases: q.biases };
}
