/** `voxslab/devices`: audio devices a conversation runs on (`conversation.run(device, …)`). */
export { LoopbackDevice } from './io/loopback.js';
export type { LoopbackOptions } from './io/loopback.js';
export { findDevice, listDevices, PortAudioDevice } from './io/devices.js';
export type { AudioDevice, ClockedDevice, PortAudioOptions } from './io/devices.js';
export type { EchoPathOptions } from './dsp/echo.js';
export type { DuplexDevice } from './core/session.js';
