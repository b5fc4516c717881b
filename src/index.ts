/** voxslab public library API. */
export * from './api/index.js';
export * from './memory/index.js';
export { native } from './native.js';
export type { CpuFeatures, NativeResult, PinResult } from './native.js';
// Full duplex on one thread: a conversation of the single-thread engine on a duplex device.
export { SpeechModel } from './pipeline/conversation.js';
export { DuplexSession } from './pipeline/session.js';
export type { DuplexDevice, DuplexEvents, DuplexOptions } from './pipeline/session.js';
export { LoopbackDevice } from './io/loopback.js';
export { findDevice, listDevices, PortAudioDevice } from './io/devices.js';
export type { AudioDevice } from './io/devices.js';
