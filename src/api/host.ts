/** What the engine and its conversations share inside the library: the host a conversation calls, the pump's symbols, abort errors. */
import { AbortedError } from '../errors.js';
import type { MemoryManifest } from '../memory/manifest.js';
import type { Pipeline, PipelineConversation } from '../runtime/coordinator.js';

/** Read through a call: a signal can fire across an await (TypeScript narrows the property). */
export function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}

/** @internal The engine's pump call (not part of the public surface). */
export const kPump = Symbol('pump');
/** @internal The engine's failure call. */
export const kFail = Symbol('fail');
/** @internal A conversation's device link (Engine.runTogether). */
export const kAttach = Symbol('attach');
/** @internal */
export const kDetach = Symbol('detach');

export function aborted(signal: AbortSignal, what: string): AbortedError {
  return new AbortedError(`${what} aborted${signal.reason instanceof Error ? `: ${signal.reason.message}` : ''}`, { cause: signal.reason });
}

/** @internal What a conversation needs of its engine. */
export interface ConversationHost {
  readonly pipeline: Pipeline;
  readonly outputRate: number;
  memory(): MemoryManifest;
  /** New input or demand: run the pump, or wake it. */
  wake(): void;
  /** The conversation ended: its pipeline conversation is closed. */
  release(conv: object, pc: PipelineConversation): Promise<void>;
}
