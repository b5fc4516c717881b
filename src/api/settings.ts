/**
 * A VAD conversation's turn-taking settings (`conversation.update`): checked against the engine
 * that runs it, and put in the units the stages read from the conversation's shared words.
 */
import type { ResolvedSpeechOptions } from '../core/conversation.js';
import { VAD_LIKELIHOOD } from '../dsp/aec.js';
import { framesOf } from '../duplex/turn.js';
import { ArgumentError } from '../errors.js';
import { optionValue } from '../options.js';
import type { ConversationSettings } from './types.js';

export type Settings = Required<ConversationSettings>;

const KNOWN = ['silenceMs', 'minSpeechMs', 'vad', 'lookaheadMs'];

/** The engine's own settings: where every conversation starts. */
export function engineSettings(so: ResolvedSpeechOptions): Settings {
  return { silenceMs: so.silenceMs, minSpeechMs: so.minSpeechMs, vad: so.vad as Settings['vad'], lookaheadMs: so.lookaheadMs };
}

/** `current` with `given` applied, every value checked first (ArgumentError names the first that is not). */
export function nextSettings(current: Settings, given: ConversationSettings, so: ResolvedSpeechOptions): Settings {
  if (typeof given !== 'object' || given === null) throw new ArgumentError('update takes an object of settings');
  for (const k of Object.keys(given)) if (!KNOWN.includes(k)) throw new ArgumentError(`update: unknown setting '${k}' (known: ${KNOWN.join(', ')})`);
  const next = { ...current };
  if (given.silenceMs !== undefined) next.silenceMs = optionValue<number>('silenceMs', given.silenceMs);
  if (given.minSpeechMs !== undefined) next.minSpeechMs = optionValue<number>('minSpeechMs', given.minSpeechMs);
  if (given.vad !== undefined) {
    if (so.vad === 'silero') throw new ArgumentError("update: the engine was loaded with vad: 'silero', whose detector has no likelihood to change");
    if (!Object.hasOwn(VAD_LIKELIHOOD, given.vad)) throw new ArgumentError(`update: vad must be very-low, low, moderate or high, got '${String(given.vad)}'`);
    next.vad = given.vad;
  }
  if (given.lookaheadMs !== undefined) {
    const ms = optionValue<number>('lookaheadMs', given.lookaheadMs);
    if (ms > so.lookaheadMs)
      throw new ArgumentError(`update: lookaheadMs may be at most the engine's ${so.lookaheadMs} (its barge-in checkpoints are planned for it), got ${ms}`);
    next.lookaheadMs = ms;
  }
  return next;
}

/** The settings as the stages read them: 10 ms frames, the VAD's likelihood level (0: Silero), output samples. */
export function settingsWords(s: Settings, so: ResolvedSpeechOptions): { silence: number; minSpeech: number; vad: number; lookahead: number } {
  return {
    silence: framesOf(s.silenceMs),
    minSpeech: framesOf(s.minSpeechMs),
    vad: so.vad === 'silero' ? 0 : VAD_LIKELIHOOD[s.vad],
    lookahead: Math.max(1, Math.round((s.lookaheadMs * so.outputRate) / 1000)),
  };
}
