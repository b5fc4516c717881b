/** voxslab public library API. */
export * from './api/index.js';
export * from './memory/index.js';
export { native } from './native.js';
export type { CpuFeatures, NativeResult, PinResult } from './native.js';
