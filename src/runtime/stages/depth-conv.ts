/**
 * A conversation as the Depthformer stage holds it: its rings, its dialogue, where its turn is
 * (PHASE_*), and what barge-in and speculation keep of it (docs/duplex.md). Used by one stage
 * thread; nothing here allocates.
 */
import type { Dialogue } from '../../core/dialogue.js';
import { EMIT_DONE, EMIT_TEXT } from '../../core/reply-state.js';
import { heardFrames, keptFrames, NO_CUT } from '../../duplex/bargein.js';
import { type RecordRing, RECORD_OVERHEAD } from '../ring.js';
import {
  BARGE_FIELDS,
  BARGE_FRAMES,
  BARGE_GENERATED,
  BARGE_POSITIONS,
  BARGE_REPLY,
  BARGE_TEXT_TOKENS,
  kHeard,
  kHeardReply,
  kOnsetsSeen,
  REC_BARGE,
  TURN_COMPACTIONS,
  TURN_FIELDS,
  TURN_DROPPED,
  TURN_END_OF_AUDIO,
  TURN_FRAMES,
  TURN_POSITIONS,
  TURN_STOP,
  TURN_TEXT_TOKENS,
  TURN_USER_FRAMES,
} from '../protocol.js';

export const PHASE_IDLE = 0;
export const PHASE_PREFILL = 1;
export const PHASE_REPLY = 2;
export const PHASE_AHEAD = 3; // a speculative reply, generated into `held` until the endpoint answers

export const SPEC_NONE = 0;
export const SPEC_STAGING = 1; // a provisional turn's rows are staged, after a mark
export const SPEC_AHEAD = 2; // its reply is generated ahead
export const SPEC_DECLINED = 3; // its rows are skipped (no room to roll back, or no slot): the turn comes again if confirmed
export const SPEC_SKIP = 4; // a confirmed turn's rows come again: skipped, it is staged already
/** Audio frames a speculative reply generates ahead of the endpoint, and a held step's fields before its payload. */
export const AHEAD_FRAMES = 4;
export const HELD_FIELDS = 1;

export interface DepthConv {
  index: number;
  input: RecordRing;
  codes: RecordRing;
  events: RecordRing;
  dialogue: Dialogue;
  slot: number;
  phase: number; // PHASE_*
  summary: Int32Array; // [TURN_FIELDS]
  /** VAD conversation: barge-in and the look-ahead run through `words`. */
  vad: boolean;
  words: Int32Array;
  barge: Int32Array; // [BARGE_FIELDS] a BARGE record's payload
  starts: number; // speech onsets passed on
  replies: number; // replies begun (the last is number replies − 1)
  cutReply: number; // the last reply cut by a barge-in (-1: none)
  /** Frames of the last reply the listener heard at the onset being judged (-1: none being judged). */
  verdict: number;
  /** Speculation (SPEC_*): a provisional turn staged after a mark, its reply generated ahead into `held`. */
  speculates: boolean;
  spec: number;
  held: Int32Array; // [holdSteps][HELD_FIELDS + codebooks] what each step ahead emitted: EMIT_*, then the token or the frame
  heldCount: number;
  aheadDone: boolean; // the reply ahead ended (its EMIT_DONE is held)
  /** The reply's frames sent and when its first was (ms, stage clock; -1: none yet): its lead over a player that began then. */
  sent: number;
  firstAt: number;
  /** Since when (ms) a turn's prefill or first step has waited for the running replies' lead (-1: not waiting). */
  deferredAt: number;
}

/** Room in both of `c`'s output rings for what one reply step may emit (a frame of `cb` codes, and the turn's summary). */
export function roomToStep(c: DepthConv, cb: number): boolean {
  return c.codes.canWrite(cb + RECORD_OVERHEAD + 2) && c.events.canWrite(cb + TURN_FIELDS + 2 * RECORD_OVERHEAD);
}

/** What `systemDonor` returns while another conversation is running its system prompt. */
export const WAIT_FOR_DONOR = 1;

/** A conversation whose system prompt `c` may copy, WAIT_FOR_DONOR while one is running it, or null. */
export function systemDonor(conversations: readonly (DepthConv | undefined)[], c: DepthConv): DepthConv | null | typeof WAIT_FOR_DONOR {
  let wait = false;
  for (let k = 0; k < conversations.length; k++) {
    const d = conversations[k];
    if (d === undefined || d === c) continue;
    if (d.dialogue.systemSaved) return d;
    if (d.dialogue.systemRunning) wait = true;
  }
  return wait ? WAIT_FOR_DONOR : null;
}

/** `c`'s turn summary (TURN_FIELDS), filled from its dialogue as the turn ends. */
export function summarize(c: DepthConv): Int32Array {
  const d = c.dialogue;
  const sm = c.summary;
  sm[TURN_TEXT_TOKENS] = d.textTokens;
  sm[TURN_FRAMES] = d.frames;
  sm[TURN_STOP] = d.stop === 'end-of-turn' ? 1 : d.stop === 'interrupted' ? 2 : 0;
  sm[TURN_END_OF_AUDIO] = d.endOfAudio ? 1 : 0;
  sm[TURN_POSITIONS] = d.position;
  sm[TURN_COMPACTIONS] = d.compactions;
  sm[TURN_DROPPED] = d.dropped;
  sm[TURN_USER_FRAMES] = d.userFrames;
  return sm;
}

/** Keeps what a step ahead of the endpoint emitted (`c.dialogue`'s token or frame); true at its end. */
export function hold(c: DepthConv, e: number, cb: number): boolean {
  const d = c.dialogue;
  const at = c.heldCount++ * (HELD_FIELDS + cb);
  c.held[at] = e;
  if (e === EMIT_TEXT) c.held[at + HELD_FIELDS] = d.token;
  else if (e !== EMIT_DONE) for (let i = 0; i < cb; i++) c.held[at + HELD_FIELDS + i] = d.codes[i]!;
  else c.aheadDone = true;
  return c.aheadDone;
}

/**
 * Judges the speech onset at the head of `c`'s input: it interrupts the last reply if the
 * listener had not heard all of it. The reply is cut to the frames heard (at least the first,
 * generated if need be) and a BARGE record tells the main thread what stays. False while it
 * waits: for the main thread's answer to this onset, for the first frame, or for room.
 */
export function judge(c: DepthConv, frameSamples: number): boolean {
  const w = c.words;
  if (c.verdict < 0) {
    if (Atomics.load(w, kOnsetsSeen) <= c.starts) return false;
    c.verdict = heardFrames(c.replies - 1, c.cutReply, Atomics.load(w, kHeardReply), Atomics.load(w, kHeard), frameSamples);
  }
  const d = c.dialogue;
  const cut = c.verdict !== NO_CUT;
  // A reply cut before its first frame keeps that frame (its text alone was not heard either).
  if (cut && c.phase === PHASE_REPLY && d.frames === 0) return false;
  // The main thread reads the events ring at once (it may hold the output ring meanwhile).
  if (!c.events.canWrite(BARGE_FIELDS + RECORD_OVERHEAD + 2)) return false;
  const b = c.barge;
  b[BARGE_REPLY] = -1;
  b[BARGE_FRAMES] = -1;
  b[BARGE_GENERATED] = d.frames;
  if (cut) {
    const kept = d.truncate(keptFrames(d.frames, c.verdict)) ? d.frames : -1;
    // A finished reply whose context cannot be cut (no audio, or forgotten) plays on.
    if (kept >= 0 || c.phase === PHASE_REPLY) {
      c.cutReply = c.replies - 1;
      b[BARGE_REPLY] = c.cutReply;
      b[BARGE_FRAMES] = kept;
    }
  }
  b[BARGE_TEXT_TOKENS] = d.textTokens;
  b[BARGE_POSITIONS] = d.position;
  c.events.write(REC_BARGE, b, 0, BARGE_FIELDS);
  // Cut mid-reply, the next step ends the turn; one whose context could not be cut runs on, unheard.
  c.verdict = -1;
  return true;
}
