/**
 * Who computes next in the Depthformer stage (docs/architecture.md): a pass over a turn's prompt
 * (a prefill chunk, or a reply's first step, which runs the turn's last rows) can take as long
 * as many batched steps, so it runs only while every reply already playing is ahead of its
 * player by more than that pass, a batched step and two frames, at most one a poll while
 * replies step. A pass that has waited MAX_DEFER_MS runs whatever the leads. Used by one stage
 * thread; nothing here allocates.
 */
import { native } from '../../native.js';
import { RECORD_OVERHEAD } from '../ring.js';
import { kPlayed, kPlayedReply, TURN_FIELDS } from '../protocol.js';
import { type DepthConv, PHASE_REPLY } from './depth-conv.js';

/**
 * Longest a pass waits for the running replies to get ahead (ms): past it, it runs whatever
 * their lead (a machine over its capacity starts every reply late rather than one never).
 */
const MAX_DEFER_MS = 500;
/** Weight of the latest duration in the running estimates of a pass and a batched step. */
const COST_WEIGHT = 0.25;

export class ReplyDeadline {
  /** Running estimates of a prompt pass and a batched step (ms). */
  passMs = 0;
  stepMs = 0;
  /** The least lead of the replies that step (ms; Infinity: none has sent a frame), and how many step. */
  lead = Number.POSITIVE_INFINITY;
  running = 0;
  /** This poll ran a prompt pass while replies step. */
  passed = false;
  /** Passes that waited for the replies' lead, and those that stopped waiting at MAX_DEFER_MS. */
  deferred = 0;
  overdue = 0;
  readonly #now = new Float64Array(1);
  readonly #frameSamples: number;
  readonly #samplesPerMs: number;
  readonly #periodMs: number;
  readonly #codebooks: number;

  /** `frameSamples` output samples a frame at `outputRate` Hz; `codebooks` codes a frame. */
  constructor(frameSamples: number, outputRate: number, codebooks: number) {
    this.#frameSamples = frameSamples;
    this.#samplesPerMs = outputRate / 1000;
    this.#periodMs = frameSamples / this.#samplesPerMs;
    this.#codebooks = codebooks;
  }

  /** The stage's clock, ms. */
  clock(): number {
    native.clockInto(this.#now, 0);
    return this.#now[0] as number;
  }

  /**
   * At a poll's start: the replies that step, and the least lead of those playing. A VAD
   * conversation's lead is what its player has not played yet; any other's is what a player
   * that began at its first frame would not have played by now.
   */
  begin(conversations: readonly (DepthConv | undefined)[]): void {
    this.passed = false;
    this.running = 0;
    let lead = Number.POSITIVE_INFINITY;
    let now = -1;
    const cb = this.#codebooks;
    for (let k = 0; k < conversations.length; k++) {
      const c = conversations[k];
      if (c === undefined || c.phase !== PHASE_REPLY || c.slot >= 0 || !c.dialogue.batchable) continue;
      // A reply whose rings are full does not step: no pass delays it.
      if (!c.codes.canWrite(cb + RECORD_OVERHEAD + 2) || !c.events.canWrite(cb + TURN_FIELDS + 2 * RECORD_OVERHEAD)) continue;
      this.running++;
      if (c.sent === 0) continue;
      let ms: number;
      if (c.vad) {
        const w = c.words;
        const played = Atomics.load(w, kPlayedReply) === c.replies - 1 ? Atomics.load(w, kPlayed) : 0;
        ms = (c.dialogue.frames * this.#frameSamples - played) / this.#samplesPerMs;
      } else {
        if (now < 0) now = this.clock();
        ms = c.sent * this.#periodMs - (now - c.firstAt);
      }
      if (ms < lead) lead = ms;
    }
    this.lead = lead;
  }

  /** Whether `c` may run a pass over its turn's prompt now. */
  mayPass(c: DepthConv): boolean {
    if (this.running === 0) return true;
    if (this.passed) return false;
    if (this.lead >= this.passMs + this.stepMs + 2 * this.#periodMs) {
      c.deferredAt = -1;
      return true;
    }
    const now = this.clock();
    if (c.deferredAt < 0) {
      c.deferredAt = now;
      this.deferred++;
      return false;
    }
    if (now - c.deferredAt < MAX_DEFER_MS) return false;
    c.deferredAt = -1;
    this.overdue++;
    return true;
  }

  /** A prompt pass that began at `t` (clock()) ended. */
  passDone(t: number): void {
    const ms = this.clock() - t;
    this.passMs = this.passMs === 0 ? ms : this.passMs + COST_WEIGHT * (ms - this.passMs);
    this.passed = this.running > 0;
  }

  /** A batched step that began at `t` ended. */
  stepDone(t: number): void {
    const ms = this.clock() - t;
    this.stepMs = this.stepMs === 0 ? ms : this.stepMs + COST_WEIGHT * (ms - this.stepMs);
  }
}
