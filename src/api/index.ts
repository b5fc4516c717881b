/** The library API for Node applications: engines, conversations, their events and errors. */
export { Conversation, Engine, load } from './engine.js';
export type {
  ConversationEvent,
  ConversationEvents,
  ConversationOptions,
  ConversationSettings,
  EngineOptions,
  RuntimeMemory,
  SampleFormat,
  TurnSummary,
} from './engine.js';
