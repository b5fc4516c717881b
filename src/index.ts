/**
 * voxslab's library API: `load()` a model into an Engine, open Conversations on it. The errors
 * every failure is one of, and the types of options and events. Everything else is on subpaths:
 * `voxslab/devices` (audio devices), `voxslab/reference` (the one-thread engine and duplex
 * session), `voxslab/memory` (the memory core), `voxslab/native` (the addon's kernels).
 */
export * from './api/index.js';
export {
  AbortedError,
  AllocationError,
  ArgumentError,
  BadInputError,
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
