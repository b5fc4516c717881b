/**
 * `voxslab/reference`: the one-thread engine (`SpeechModel`, its `Conversation`) and the
 * one-thread duplex session, the reference the pipeline equals byte for byte; they run on the
 * calling thread, deterministic and faster than real time on the loopback device.
 */
export { SpeechModel, Conversation as ReferenceConversation } from './core/conversation.js';
export type { ReplySink, ReplySummary, SpeechModelOptions } from './core/conversation.js';
export { DuplexSession } from './core/session.js';
export type { DuplexDevice, DuplexEvents, DuplexOptions } from './core/session.js';
