/**
 * voxslab's library API: `load()` a model into an Engine, open Conversations on it. The errors
 * every failure is one of, and the types of options and events. Everything else is on subpaths:
 * `voxslab/devices` (audio devices), `voxslab/reference` (the one-thread engine and duplex
 * session), `voxslab/memory` (the memory core), `voxslab/native` (the addon's kernels).
 */
export * from './api/index.js';
export type { DeviceLink } from './api/device.js';
export type { ComputeCapacity } from './runtime/capacity.js';
export type { ReplyStop } from './core/dialogue.js';
export type { LayerKind, Lfm2Shape, ModelConfig } from './model/format/config.js';
export type { SamplingOptions } from './model/blocks/sampler.js';
export type { KvType } from './model/blocks/lfm2_state.js';
export type { MemoryManifest } from './memory/manifest.js';
export type { MemorySnapshot } from './memory/snapshot.js';
export type { ErrorOptions } from './errors.js';
export {
  AbortedError,
  AllocationError,
  ArgumentError,
  BadInputError,
  CapacityError,
  ClosedError,
  ControlTimeoutError,
  CorruptionError,
  DeviceError,
  exitCodeOf,
  InternalError,
  MemoryLimitError,
  ReadinessError,
  SharedStateError,
  UnsupportedError,
  UsageError,
  VoxslabError,
  WorkerError,
} from './errors.js';
