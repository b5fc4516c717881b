/** `voxslab/devices`: audio devices a conversation runs on (`conversation.run(device, …)`). */
export { LoopbackDevice } from './io/loopback.js';
export type { LoopbackOptions } from './io/loopback.js';
export { audioLibrary, findDevice, listDevices, openDuplexDevice, PortAudioDevice } from './io/devices.js';
export { NativeAudioDevice } from './io/native-device.js';
export type { AudioDevice, ClockedDevice, DuplexAudioDevice, PortAudioOptions } from './io/devices.js';
export type { EchoPathOptions } from './dsp/echo.js';
export type { DuplexDevice } from './core/session.js';
