/** voxslab public library API. */
export * from './api/index.js';
export * from './memory/index.js';
export { native } from './native.js';
export type { CpuFeatures, NativeResult, PinResult } from './native.js';
// Full duplex on one thread: a conversation of the single-thread engine on a duplex device.
export { SpeechModel } from './core/conversation.js';
export { DuplexSession } from './core/session.js';
export type { DuplexDevice, DuplexEvents, DuplexOptions } from './core/session.js';
export { LoopbackDevice } from './io/loopback.js';
export { findDevice, listDevices, PortAudioDevice } from './io/devices.js';
export type { AudioDevice } from './io/devices.js';
