import { type BackboneState, backboneStateSizes, STEP_BATCH } from '../../model/blocks/backbone.js';
import { Dialogue, EMIT_DONE, EMIT_END_OF_AUDIO, EMIT_TEXT, type Prompts } from '../../core/dialogue.js';
import { IDLE_POLL_MS, PassStage, type Environment } from './stage.js';
import { stageDefaults, type StageSpec } from '../topology.js';
import { EMBED_ROWS } from './conformer.js';
import { checkpointsFor, frameSamplesAt } from '../../core/frames.js';
import { buildStepSlot, type StepSlot } from '../../core/step.js';
import { RECORD_OVERHEAD } from '../ring.js';
import {
  REC_CODES,
  REC_CONFIRM,
  REC_EMBED,
  REC_END_OF_AUDIO,
  REC_END_SEGMENT,
  REC_PROVISIONAL,
  REC_RESUME,
  REC_SPEECH_END,
  REC_SPEECH_START,
  REC_TEXT,
  REC_TURN_END,
  REC_TURN_START,
  TURN_FIELDS,
  BARGE_FIELDS,
  kPlayed,
  kPlayedReply,
  kCancelReply,
  kLookaheadSet,
  kReplies,
  type StageConversation,
  type StageOpen,
  type BatchingStats,
} from '../protocol.js';
import { native } from '../../native.js';
import {
  AHEAD_FRAMES,
  type DepthConv,
  HELD_FIELDS,
  hold,
  judge,
  PHASE_AHEAD,
  PHASE_IDLE,
  PHASE_PREFILL,
  PHASE_REPLY,
  SPEC_AHEAD,
  SPEC_DECLINED,
  SPEC_NONE,
  SPEC_SKIP,
  SPEC_STAGING,
  roomToStep,
  summarize,
  systemDonor,
  WAIT_FOR_DONOR,
} from './depth-conv.js';
import { InternalError } from '../../errors.js';
import { ReplyDeadline } from './deadline.js';

import '../../core/categories.js';

interface DepthSlot extends StepSlot {
  rowsIn: Float32Array; // [EMBED_ROWS][hidden] one embedding record
}

/** Conversation indices are owner indices: never more than a ledger's owners. */
/** Longest the main thread is not woken for text and frames it has not read (they ride on the reply's samples). */
const EVENTS_LAZY_MS = 40;

/** What `#speculation` did with a record. */
const S_NORMAL = 0;
const S_TAKEN = 1;
const S_AGAIN = 2;
const S_BLOCK = 3;
/** Who holds a slot during a batched step: an index no conversation has (-1 is a free slot). */
const BATCH_HOLDER = -2;
/** What the test hooks stall on (never notified). */
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

export class DepthformerStage extends PassStage<DepthConv, DepthSlot> {
  readonly prompts: Prompts;
  #gate: number;
  /** Batched backbone calls (several conversations' positions in one), the positions they served, the widest, and the calls whose text heads or frames were batched too. */
  #batched = 0;
  #batchedRows = 0;
  #widest = 0;
  #batchedText = 0;
  #batchedFrames = 0;
  /** Conversations that copied their system prompt from another. */
  #systemCopies = 0;
  /** Provisional turns staged with their reply generated ahead, and those the endpoint kept. */
  #speculations = 0;
  #kept = 0;
  /** Steps a reply ahead may hold, and its frames. */
  readonly #holdSteps: number;
  readonly #aheadFrames: number;
  /** One batched step's conversations, dialogues, states and what each emitted (made once: no allocation per poll). */
  readonly #batch: DepthConv[] = [];
  readonly #dialogues: Dialogue[] = [];
  readonly #states: BackboneState[] = [];
  readonly #emitted = new Int32Array(STEP_BATCH);
  readonly #now = new Float64Array(1);
  /** Conversations one batched step serves: a slot's rows. */
  readonly #rows: number;
  /** Output-rate samples of one reply frame, and of the look-ahead. */
  readonly #frameSamples: number;
  readonly #lookahead: number;
  /** Who computes next: replies playing before a turn's prompt pass (deadline.ts). */
  readonly #deadline: ReplyDeadline;

  constructor(env: Environment) {
    const c = env.init.config;
    const o = env.init.options;
    let prompts: Prompts | null = null;
    super('depthformer', env, (s, work, derived, i) => {
      if (i === 0) {
        const ids = env.init.prompts;
        const meta = (name: string, v: number[]): Int32Array => {
          const a = derived(`prompt.${name}`, Int32Array, v.length);
          a.set(v);
          return a;
        };
        prompts = {
          system: meta('system', ids.system),
          userOpen: meta('user_open', ids.userOpen),
          userClose: meta('user_close', ids.userClose),
          replyClose: meta('reply_close', ids.replyClose),
        };
      }
      // Several rows: one batched step runs every ready conversation's position and heads.
      const step = buildStepSlot(c, env.image, work, derived, { chunk: o.prefillChunk, context: o.context, planner: s.planner, rows: STEP_BATCH });
      return { ...step, rowsIn: work.carve('embed.in', 'workspace.prefill', Float32Array, EMBED_ROWS * c.backbone.hidden) };
    });
    this.prompts = prompts!;
    this.#rows = this.tickets.slots[0]!.rows;
    this.#gate = env.init.gateReplies;
    this.#frameSamples = frameSamplesAt(c, o.outputRate);
    this.#lookahead = (o.lookaheadMs * o.outputRate) / 1000;
    this.#deadline = new ReplyDeadline(this.#frameSamples, o.outputRate, c.audio.codebooks);
    this.#aheadFrames = Math.max(1, Math.min(AHEAD_FRAMES, Math.floor(this.#lookahead / this.#frameSamples)));
    // The text before the first frame and after an end of audio, the frames, the end.
    this.#holdSteps = 2 * c.interleave.text + this.#aheadFrames + 2;
  }

  override batching(): BatchingStats {
    return {
      batchedSteps: this.#batched,
      batchedRows: this.#batchedRows,
      widestBatch: this.#widest,
      batchedTextHeads: this.#batchedText,
      batchedFrames: this.#batchedFrames,
      systemCopies: this.#systemCopies,
      speculations: this.#speculations,
      speculationsKept: this.#kept,
      deferredPasses: this.#deadline.deferred,
      overduePasses: this.#deadline.overdue,
    };
  }

  /** What `calibrateFrames` measures, on conversation `index`'s state (capacity calibration). */
  override calibrate(index: number, rows: readonly number[]): number[] {
    const c = this.conversations[index];
    if (c === undefined) throw new InternalError(`depthformer stage: no conversation ${index} to calibrate on`);
    return c.dialogue.calibrateFrames(this.tickets.slots[0]!, rows);
  }

  /** The test gate: false until `gateReplies` conversations have a reply ready, then always true. */
  #open(): boolean {
    if (this.#gate === 0) return true;
    let ready = 0;
    for (let k = 0; k < this.conversations.length; k++) if (this.conversations[k]?.phase === PHASE_REPLY) ready++;
    if (ready < this.#gate) return false;
    this.#gate = 0;
    return true;
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const so = this.env.init.options;
    const kvBytes = backboneStateSizes(c, so.context, so.kv).reduce((s, r) => s + r.bytes, 0);
    const speculates = o.vad && so.speculateMs > 0;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} depthformer` }], (1 << 24) + kvBytes, ([a]) => ({
      dialogue: new Dialogue(c, a!, {
        context: so.context,
        kv: so.kv,
        prefillChunk: so.prefillChunk,
        maxFrames: this.env.init.maxFrames,
        text: so.text,
        audio: so.audio,
        seed: o.seed,
        prompts: this.prompts,
        clocks: this.clocksFor(o.index, a!),
        // Barge-in returns to any frame generation ran ahead of the listener.
        checkpoints: o.vad ? checkpointsFor(c, so.lookaheadMs) : 0,
        speculative: speculates,
      }),
      held: a!.carve('speculation.held', 'metadata', Int32Array, speculates ? this.#holdSteps * (HELD_FIELDS + c.audio.codebooks) : 0),
      summary: a!.carve('turn.summary', 'metadata', Int32Array, TURN_FIELDS),
      barge: a!.carve('turn.barge', 'metadata', Int32Array, BARGE_FIELDS),
    }));
    this.conversations[o.index] = {
      index: o.index,
      input: this.input(o, 'embed'),
      codes: this.output(o, 'codes'),
      events: this.output(o, 'events'),
      slot: -1,
      phase: PHASE_IDLE,
      vad: o.vad,
      words: this.words(o),
      starts: 0,
      replies: 0,
      cutReply: -1,
      verdict: -1,
      speculates,
      spec: SPEC_NONE,
      heldCount: 0,
      aheadDone: false,
      sent: 0,
      // Doubles from the start: a field that turns from a small integer to a double changes
      // representation, and the hot paths that read it deoptimize.
      firstAt: -0.5,
      deferredAt: -0.5,
      ...conv,
    };
  }

  poll(): boolean {
    let progress = false;
    this.#deadline.begin(this.conversations);
    // Indexed, not for-of: an iterator would allocate whenever this code runs unoptimised.
    for (let k = 0; k < this.conversations.length; k++) {
      const c = this.conversations[k];
      if (c !== undefined && this.#prefill(c)) progress = true;
    }
    // The test gate holds the batched steps (a first step gives its slot back for the others' turns).
    const open = this.#open();
    // Reply: one backbone position per conversation whose rings can take what it may emit. A
    // reply's first step runs on the slot its turn was staged in, which then goes back; every
    // later step joins one batched step of all such conversations (continuous batching: a
    // conversation joins or leaves between steps), as many as a slot has rows per call.
    // Replies ahead of the endpoint come second: they take what rows the confirmed leave.
    const batch = this.#batch;
    let m = 0;
    for (let n = 0; n < 2 * this.conversations.length; n++) {
      const c = this.conversations[n % this.conversations.length];
      if (c === undefined || (c.phase === PHASE_AHEAD) !== n >= this.conversations.length || !this.#canStep(c)) continue;
      if (c.slot >= 0 || !c.dialogue.batchable) {
        // A first step that runs the turn's last prompt rows waits for the replies' lead.
        const pass = c.dialogue.prefilling;
        if (pass && !this.#deadline.mayPass(c)) continue;
        // A reply whose next step only ends it computes nothing: any slot serves.
        const slot = Math.max(c.slot, 0);
        if (pass) this.#deadline.passStart();
        this.#emit(c, c.dialogue.step(this.tickets.slots[slot]!));
        if (pass) this.#deadline.passDone();
        if ((c.phase === PHASE_REPLY || c.phase === PHASE_AHEAD) && c.slot >= 0) {
          this.tickets.release(c.slot);
          c.slot = -1;
        }
        progress = true;
        continue;
      }
      if (!open) continue;
      batch[m++] = c;
      if (m === this.#rows) {
        if (!this.#stepBatch(m)) break;
        progress = true;
        m = 0;
      }
    }
    if (m > 0 && this.#stepBatch(m)) progress = true;
    this.#flushEvents();
    return progress;
  }

  /** Runs the next step of the batch's first `m` conversations on a free slot; false when none is free. */
  #stepBatch(m: number): boolean {
    const slotIndex = this.tickets.acquire(BATCH_HOLDER);
    if (slotIndex < 0) return false;
    const slot = this.tickets.slots[slotIndex]!;
    const batch = this.#batch;
    this.#deadline.stepStart();
    if (m === 1) this.#emit(batch[0]!, batch[0]!.dialogue.step(slot));
    else {
      const ds = this.#dialogues;
      for (let r = 0; r < m; r++) ds[r] = batch[r]!.dialogue;
      const text = Dialogue.stepRows(ds, m, slot, this.#states, this.#emitted);
      this.#batched++;
      this.#batchedRows += m;
      if (m > this.#widest) this.#widest = m;
      if (text >= 2) this.#batchedText++;
      if (m - text >= 2) this.#batchedFrames++;
      // stepRows reordered the dialogues: each emits through its own conversation.
      for (let r = 0; r < m; r++) this.#emit(this.#owner(ds[r]!, m), this.#emitted[r]!);
    }
    this.#deadline.stepDone();
    this.tickets.release(slotIndex);
    return true;
  }

  /** The batch's conversation whose dialogue is `d`. */
  #owner(d: Dialogue, m: number): DepthConv {
    for (let r = 0; r < m; r++) if (this.#batch[r]!.dialogue === d) return this.#batch[r]!;
    throw new InternalError('depthformer: a batched dialogue without its conversation');
  }

  override idle(): number {
    return Math.min(IDLE_POLL_MS, this.#flushEvents());
  }

  /**
   * Text and frames wait for the main thread's next wake-up (a reply's samples bring it every
   * frame) until they have waited EVENTS_LAZY_MS; then they ring it. Returns the ms until the
   * next such ring is due (Infinity: none is owed).
   */
  #flushEvents(): number {
    let next = Number.POSITIVE_INFINITY;
    let clock = false;
    for (let k = 0; k < this.conversations.length; k++) {
      const ev = this.conversations[k]?.events;
      if (ev === undefined || !ev.owes()) continue;
      if (!clock) {
        native.clockInto(this.#now, 0);
        clock = true;
      }
      const left = ev.owedAt + EVENTS_LAZY_MS - (this.#now[0] as number);
      if (left <= 0) ev.flush();
      else next = Math.min(next, left);
    }
    return next;
  }

  /**
   * Takes every record that has arrived for `c`: speech events at any time (a speech onset
   * waits for the main thread's answer, then for the verdict on the reply it may cut),
   * embedding rows and the segment's end outside a reply. True if any was taken.
   */
  #prefill(c: DepthConv): boolean {
    // A new conversation copies its system prompt from a conversation that ran it (or waits
    // for one running it); otherwise it runs it before any turn, a chunk per poll (other
    // conversations step in between), on a slot held for that chunk only.
    if (!c.dialogue.systemDone && c.phase === PHASE_IDLE) {
      const donor = systemDonor(this.conversations, c);
      if (donor === WAIT_FOR_DONOR) return false;
      if (donor !== null && c.dialogue.copySystem(donor.dialogue)) {
        this.#systemCopies++;
        return true;
      }
      const slot = this.tickets.acquire(c.index);
      if (slot >= 0) {
        c.dialogue.prefillSystem(this.tickets.slots[slot]!);
        this.tickets.release(slot);
        return true;
      }
    }
    let progress = false;
    for (;;) {
      const kind = c.input.peekKind();
      if (kind < 0) break;
      if (kind === REC_SPEECH_START && c.vad && !judge(c, this.#frameSamples)) break;
      if (kind === REC_SPEECH_START || kind === REC_SPEECH_END) {
        if (!c.events.canWrite(2)) break;
        const v = c.input.peekLength() > 0 ? c.input.peekInt(0) : 0;
        c.input.skip();
        c.events.write2(kind, v, 0);
        if (kind === REC_SPEECH_START) c.starts++;
        this.records++;
        progress = true;
        continue;
      }
      const sp = this.#speculation(c, kind);
      if (sp === S_BLOCK) break;
      if (sp === S_AGAIN) continue;
      if (sp === S_TAKEN) {
        this.records++;
        progress = true;
        continue;
      }
      if (c.phase === PHASE_REPLY) break;
      if (c.phase === PHASE_IDLE) {
        if (!this.#roomToStage()) break;
        const slot = this.tickets.acquire(c.index);
        if (slot < 0) break;
        c.slot = slot;
        c.dialogue.beginUser(this.tickets.slots[slot]!);
        c.phase = PHASE_PREFILL;
      }
      const s = this.tickets.slots[c.slot]!;
      if (kind === REC_EMBED) {
        const D = this.config.backbone.hidden;
        // A record that completes a prefill chunk waits for the replies' lead; after one, the
        // replies step before the next.
        const pass = c.dialogue.runsChunk(c.input.peekLength() / D);
        if (pass && !this.#deadline.mayPass(c)) break;
        if (pass) this.#deadline.passStart();
        const n = c.input.read(s.rowsIn, 0);
        c.dialogue.pushRows(s, s.rowsIn, 0, n / D);
        if (pass) this.#deadline.passDone();
        if (pass && this.#deadline.running > 0) {
          this.records++;
          return true;
        }
      } else {
        if (kind === REC_END_SEGMENT && !c.codes.canWrite(0)) break;
        c.input.skip();
        if (kind === REC_END_SEGMENT) {
          c.dialogue.endUser(s, this.env.init.replyFrameLimits[c.replies] ?? this.env.init.maxFrames);
          c.codes.write(REC_TURN_START, null, 0, 0);
          c.phase = PHASE_REPLY;
          c.replies++;
          if (c.vad) Atomics.store(c.words, kReplies, c.replies);
        }
      }
      this.records++;
      progress = true;
    }
    return progress;
  }

  /** Some reply steps in the batched step (its first step is done). */
  #replying(): boolean {
    for (let k = 0; k < this.conversations.length; k++) {
      const d = this.conversations[k];
      if (d !== undefined && d.phase === PHASE_REPLY && d.slot < 0) return true;
    }
    return false;
  }

  /** A turn may take a slot to stage in if one stays free for the batched step of the replies that need it. */
  #roomToStage(): boolean {
    return this.tickets.slots.length - this.tickets.busy >= 2 || !this.#replying();
  }

  /** In its reply, with room in both output rings for what one position may emit, and (VAD) within the look-ahead. */
  #canStep(c: DepthConv): boolean {
    // Ahead of the endpoint: into `held`, a few frames, whatever the rings hold.
    if (c.phase === PHASE_AHEAD) return !c.aheadDone && c.heldCount < this.#holdSteps - 1 && c.dialogue.frames < this.#aheadFrames;
    const cb = this.config.audio.codebooks;
    if (c.phase !== PHASE_REPLY || !roomToStep(c, cb)) return false;
    // A reply the main thread cancelled ends at its next step, wherever the look-ahead is.
    if (Atomics.load(c.words, kCancelReply) === c.replies) {
      c.dialogue.cancel();
      return true;
    }
    // No look-ahead while an onset waits for the reply's first frame, nor for a cut reply (unheard).
    if (!c.vad || c.verdict >= 0 || c.cutReply === c.replies - 1) return true;
    const w = c.words;
    const played = Atomics.load(w, kPlayedReply) === c.replies - 1 ? Atomics.load(w, kPlayed) : 0;
    const set = Atomics.load(w, kLookaheadSet);
    return c.dialogue.frames * this.#frameSamples - played < (set > 0 ? set : this.#lookahead);
  }

  /** Sends what one step of `c` emitted; at the turn's end, its summary, and its slot goes back. */
  #emit(c: DepthConv, e: number): void {
    const d = c.dialogue;
    if (c.phase === PHASE_AHEAD) {
      if (hold(c, e, this.config.audio.codebooks) && c.slot >= 0) {
        this.tickets.release(c.slot);
        c.slot = -1;
      }
    } else this.#send(c, e, d.token, d.codes, 0);
  }

  /** Sends a step's `e`: its `token`, or its frame from `codes` at `at`; at the turn's end, its summary, and its slot goes back. */
  #send(c: DepthConv, e: number, token: number, codes: Int32Array, at: number): void {
    const cb = this.config.audio.codebooks;
    if (e === EMIT_TEXT) {
      c.events.write2(REC_TEXT, token, 0, true);
    } else if (e === EMIT_DONE) {
      // Events first: whoever sees the turn end through playback can then read its summary.
      c.events.write(REC_TURN_END, summarize(c), 0, TURN_FIELDS);
      if (this.env.init.turnEndPauseMs > 0) Atomics.wait(PAUSE, 0, 0, this.env.init.turnEndPauseMs);
      c.codes.write(REC_TURN_END, null, 0, 0);
      if (c.slot >= 0) this.tickets.release(c.slot);
      c.slot = -1;
      c.phase = PHASE_IDLE;
      c.sent = 0;
      c.firstAt = -0.5;
    } else {
      const kind = e === EMIT_END_OF_AUDIO ? REC_END_OF_AUDIO : REC_CODES;
      const first = kind === REC_CODES && c.sent++ === 0;
      if (first) this.#deadline.first(c);
      c.codes.write(kind, codes, at, cb);
      c.events.write(kind, codes, at, cb, kind === REC_CODES);
      if (first && this.env.init.firstFramePauseMs > 0) {
        c.events.flush();
        Atomics.wait(PAUSE, 0, 0, this.env.init.firstFramePauseMs);
      }
    }
    this.records++;
  }

  /**
   * Speculation (docs/duplex.md): a provisional turn is staged after a mark of the dialogue and
   * its reply generated ahead into `held`; the endpoint's CONFIRM sends what is held and the
   * reply goes on, anything else returns the dialogue to the mark. A turn that could not be
   * rolled back (a compaction would run) or finds no slot is declined: its rows are skipped, and
   * come again after a CONFIRM. S_NORMAL: `kind` is the turn's own business.
   */
  #speculation(c: DepthConv, kind: number): number {
    const d = c.dialogue;
    switch (c.spec) {
      case SPEC_NONE:
        if (kind === REC_PROVISIONAL) {
          if (c.phase === PHASE_REPLY) return S_BLOCK;
          const frames = c.input.peekInt(0);
          c.input.skip();
          const slot = c.speculates && c.phase === PHASE_IDLE && d.fits(frames, this.#holdSteps) && this.#roomToStage() ? this.tickets.acquire(c.index) : -1;
          if (slot < 0) {
            c.spec = SPEC_DECLINED;
            return S_TAKEN;
          }
          d.mark();
          c.slot = slot;
          d.beginUser(this.tickets.slots[slot]!);
          c.phase = PHASE_PREFILL;
          c.spec = SPEC_STAGING;
          this.#speculations++;
          return S_TAKEN;
        }
        if (kind === REC_CONFIRM || kind === REC_RESUME) {
          c.input.skip();
          return S_TAKEN;
        }
        return S_NORMAL;
      case SPEC_STAGING:
        if (kind === REC_EMBED) return S_NORMAL;
        if (kind === REC_END_SEGMENT) {
          c.input.skip();
          d.endUser(this.tickets.slots[c.slot]!, this.env.init.replyFrameLimits[c.replies] ?? this.env.init.maxFrames);
          c.phase = PHASE_AHEAD;
          c.spec = SPEC_AHEAD;
          c.heldCount = 0;
          c.aheadDone = false;
          return S_TAKEN;
        }
        break;
      case SPEC_AHEAD:
        if (kind === REC_CONFIRM) {
          if (!this.#release(c)) return S_BLOCK;
          c.input.skip();
          c.spec = SPEC_SKIP;
          this.#kept++;
          return S_TAKEN;
        }
        break;
      default:
        // Declined or confirmed: the rows that come (again) are skipped until the answer, or the turn's end.
        if (kind === REC_EMBED || (kind === REC_END_SEGMENT && c.spec === SPEC_DECLINED)) {
          c.input.skip();
          return S_TAKEN;
        }
        if (kind === REC_END_SEGMENT) {
          // The confirmed turn's end, come again.
          c.input.skip();
          c.spec = SPEC_NONE;
          return S_TAKEN;
        }
        c.spec = SPEC_NONE;
        if (kind === REC_CONFIRM || kind === REC_RESUME) {
          c.input.skip();
          return S_TAKEN;
        }
        return S_AGAIN;
    }
    // Staged or generated ahead, and not the turn: back to the mark.
    d.rollback();
    if (c.slot >= 0) this.tickets.release(c.slot);
    c.slot = -1;
    c.phase = PHASE_IDLE;
    c.spec = SPEC_NONE;
    c.heldCount = 0;
    if (kind !== REC_RESUME) return S_AGAIN;
    c.input.skip();
    return S_TAKEN;
  }

  /** The endpoint confirmed `c`'s reply ahead: its turn starts and what it holds is sent. False while the rings have no room for it. */
  #release(c: DepthConv): boolean {
    const cb = this.config.audio.codebooks;
    const words = (c.heldCount + 1) * (cb + RECORD_OVERHEAD) + TURN_FIELDS + RECORD_OVERHEAD;
    if (!c.codes.canWrite(words) || !c.events.canWrite(words)) return false;
    c.codes.write(REC_TURN_START, null, 0, 0);
    c.replies++;
    if (c.vad) Atomics.store(c.words, kReplies, c.replies);
    c.dialogue.confirm();
    c.phase = PHASE_REPLY;
    for (let r = 0; r < c.heldCount; r++) {
      const at = r * (HELD_FIELDS + cb);
      this.#send(c, c.held[at]!, c.held[at + HELD_FIELDS]!, c.held, at + HELD_FIELDS);
    }
    c.heldCount = 0;
    return true;
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'depthformer', (env) => new DepthformerStage(env)),
  // The busiest stage (a backbone step and a Depthformer frame per 80 ms): a CPU of its own first.
  ...{ reads: ['embed'], writes: ['codes', 'events'], compute: true, heavy: true, pin: 4, clocks: ['prefill', 'textStep', 'audioStep', 'depthformer'] },
  capacities: { codes: (c) => 64 * (c.audio.codebooks + RECORD_OVERHEAD), events: () => 4096 },
};
