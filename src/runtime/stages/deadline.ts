/**
 * Who computes next in the Depthformer stage (docs/architecture.md): a pass over a turn's prompt
 * (a prefill chunk, or a reply's first step, which runs the turn's last rows) can take as long
 * as many batched steps, so it runs only while every reply already playing is ahead of its
 * player by more than that pass, a batched step and two frames, at most one a poll while
 * replies step. A pass that has waited MAX_DEFER_MS runs whatever the leads. Used by one stage
 * thread; nothing here allocates.
 */
import { native } from '../../native.js';
import { kPlayed, kPlayedReply } from '../protocol.js';
import { type DepthConv, PHASE_REPLY, roomToStep } from './depth-conv.js';

/**
 * Longest a pass waits for the running replies to get ahead (ms): past it, it runs whatever
 * their lead (a machine over its capacity starts every reply late rather than one never).
 */
const MAX_DEFER_MS = 500;
/** Weight of the latest duration in the running estimates of a pass and a batched step. */
const COST_WEIGHT = 0.25;

/** Slots of `#ms`: running estimates of a prompt pass and a batched step, and the least lead of the replies that step (Infinity: none has sent a frame). */
const PASS = 0;
const STEP = 1;
const LEAD = 2;
/** Slots of `#ms`: when the pass or step under way began. */
const PASS_AT = 3;
const STEP_AT = 4;

export class ReplyDeadline {
  /** Milliseconds kept in a typed array: a double in an object field may change the field's representation, and a hot path that reads it deoptimizes. */
  readonly #ms = new Float64Array(5);
  /** Replies that step this poll. */
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
    this.#ms[LEAD] = Number.POSITIVE_INFINITY;
    this.#frameSamples = frameSamples;
    this.#samplesPerMs = outputRate / 1000;
    this.#periodMs = frameSamples / this.#samplesPerMs;
    this.#codebooks = codebooks;
  }

  /**
   * The stage's clock, ms, into `#now[0]` (no double crosses a call: one that is not inlined
   * boxes it, and the stage's poll allocates nothing).
   */
  #tick(): void {
    native.clockInto(this.#now, 0);
  }

  /** `c`'s reply sent its first frame now. */
  first(c: DepthConv): void {
    this.#tick();
    c.firstAt = this.#now[0] as number;
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
      if (!roomToStep(c, cb)) continue;
      this.running++;
      if (c.sent === 0) continue;
      let ms: number;
      if (c.vad) {
        const w = c.words;
        const played = Atomics.load(w, kPlayedReply) === c.replies - 1 ? Atomics.load(w, kPlayed) : 0;
        ms = (c.dialogue.frames * this.#frameSamples - played) / this.#samplesPerMs;
      } else {
        if (now < 0) {
          this.#tick();
          now = this.#now[0] as number;
        }
        ms = c.sent * this.#periodMs - (now - c.firstAt);
      }
      if (ms < lead) lead = ms;
    }
    this.#ms[LEAD] = lead;
  }

  /** Whether `c` may run a pass over its turn's prompt now. */
  mayPass(c: DepthConv): boolean {
    if (this.running === 0) return true;
    if (this.passed) return false;
    const ms = this.#ms;
    if ((ms[LEAD] as number) >= (ms[PASS] as number) + (ms[STEP] as number) + 2 * this.#periodMs) {
      c.deferredAt = -0.5;
      return true;
    }
    this.#tick();
    const now = this.#now[0] as number;
    if (c.deferredAt < 0) {
      c.deferredAt = now;
      this.deferred++;
      return false;
    }
    if (now - c.deferredAt < MAX_DEFER_MS) return false;
    c.deferredAt = -0.5;
    this.overdue++;
    return true;
  }

  /** A prompt pass begins, and ends. */
  passStart(): void {
    this.#tick();
    this.#ms[PASS_AT] = this.#now[0] as number;
  }

  passDone(): void {
    this.#estimate(PASS, PASS_AT);
    this.passed = this.running > 0;
  }

  /** A batched step begins, and ends. */
  stepStart(): void {
    this.#tick();
    this.#ms[STEP_AT] = this.#now[0] as number;
  }

  stepDone(): void {
    this.#estimate(STEP, STEP_AT);
  }

  /** The running estimate `k` takes the time since `#ms[at]`. */
  #estimate(k: number, at: number): void {
    this.#tick();
    const m = this.#ms;
    const ms = (this.#now[0] as number) - (m[at] as number);
    const e = m[k] as number;
    m[k] = e === 0 ? ms : e + COST_WEIGHT * (ms - e);
  }
}
