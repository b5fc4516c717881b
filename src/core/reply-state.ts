/**
 * What a dialogue holds between and during turns, and how it returns to an earlier moment
 * (docs/model.md, Prompt and generation; docs/duplex.md): the
 * backbone state, the sampler, the generation counters of the reply in progress, the barge-in
 * checkpoints and one speculative mark. `Dialogue` (dialogue.ts) runs the turns on it.
 *
 * A checkpoint or the mark keeps the counters, the position, the sampler's state, the
 * short-conv states and the last frame: what the dialogue would hold had it stopped there. Cache
 * rows past a kept position are not kept: attention never reads past the position, and the
 * rows are written again when the positions are reached again.
 *
 * Thread contract: one thread, one call at a time. After construction nothing allocates.
 */
import { native } from '../native.js';
import { ArgumentError, InternalError } from '../errors.js';
import type { Arena } from '../memory/arena.js';
import { arenaWorkspace } from '../dsp/workspace.js';
import type { ModelConfig } from '../model/format/config.js';
import { BackboneState, type KvType } from '../model/blocks/backbone.js';
import { Sampler, type SamplingOptions } from '../model/blocks/sampler.js';
import { Stopwatch, type StageClocks } from './clock.js';

/** How a reply ended: `<|im_end|>`, the reply length, or the listener's barge-in. */
export type ReplyStop = 'end-of-turn' | 'length' | 'interrupted';

/** What one `step()` produced. */
export const EMIT_NONE = 0;
export const EMIT_TEXT = 1; // `token`
export const EMIT_FRAME = 2; // `codes`
export const EMIT_END_OF_AUDIO = 3; // `codes`, all 2048
export const EMIT_DONE = 4; // the turn is over: see `stop`

export interface Prompts {
  system: Int32Array;
  userOpen: Int32Array;
  userClose: Int32Array;
  replyClose: Int32Array;
}

export interface DialogueOptions {
  context: number;
  kv: KvType;
  prefillChunk: number;
  /** Audio frames a reply may hold. */
  maxFrames: number;
  text: SamplingOptions;
  audio: SamplingOptions;
  /** Audio frames of a reply `truncate` can return to (0: none). */
  checkpoints?: number;
  /** Keeps room for one `mark` (a speculative turn that may be rolled back). */
  speculative?: boolean;
}

/** Named fields of a checkpoint's metadata row. */
export const CK_FRAME = 0; // frames emitted (1-based frame number), -1 = empty
export const CK_POSITION = 1;
const CK_SAMPLER = 2;
const CK_TEXT = 3;
const CK_LEFT = 4;
const CK_TEXT_DONE = 5;
const CK_STEP = 6;
const CK_TEXT_TOKENS = 7;
const CK_END_OF_AUDIO = 8;
const CK_DROPPED = 9;
// What only a speculative turn's mark needs (a barge-in sets these itself).
const CK_PENDING = 10;
const CK_TOKEN = 11;
const CK_TURNS = 12;
const CK_USER_FRAMES = 13;
const CK_MAX_STEPS = 14;
const CK_MAX_FRAMES = 15;
const CK_STOP = 16;
export const CK_FIELDS = 17;
const STOPS: readonly ReplyStop[] = ['length', 'end-of-turn', 'interrupted'];

export class ReplyState {
  readonly config: ModelConfig;
  readonly state: BackboneState;
  readonly sampler: Sampler;
  readonly codes: Int32Array; // [codebooks] the last frame
  readonly prompts: Prompts;
  readonly options: Readonly<Required<DialogueOptions>>;
  /** Positions of the system prompt (kept when the context is compacted). */
  readonly keep: number;
  protected readonly clocks: StageClocks;
  protected readonly watch = new Stopwatch();
  protected readonly ckMeta: Int32Array; // [checkpoints][CK_FIELDS]
  protected readonly ckConv: Float32Array; // [checkpoints][short-conv layers][kernel − 1][hidden]
  protected readonly ckCodes: Int32Array; // [checkpoints][codebooks]
  protected readonly convFloats: number;
  protected readonly systemConv: Float32Array; // [short-conv layers][kernel − 1][hidden] at the system prompt's end
  protected readonly markMeta: Int32Array; // [CK_FIELDS] what `rollback` returns to (empty unless speculative)
  protected readonly markConv: Float32Array; // [short-conv floats]
  protected readonly markCodes: Int32Array; // [codebooks]
  protected marked = false;
  protected savedSystem = false;
  /** Positions forgotten by the context policy so far, and how many times. */
  dropped = 0;
  compactions = 0;
  /** The last emitted text token (valid after EMIT_TEXT). */
  token = 0;
  // Turn state.
  protected staged = 0;
  protected systemAt = 0; // system prompt positions already run
  protected turns = 0;
  protected pending = 0; // 1: `token`, 2: `codes` is fed first at the next turn
  protected atText = true;
  protected left = 0;
  protected textDone = false;
  protected stepAt = 0;
  protected maxSteps = 0;
  protected maxFrames = 0;
  /** Adapter rows of the current (or last) user turn. */
  userFrames = 0;
  /** The current (or last) reply's counts and how it ended. */
  textTokens = 0;
  frames = 0;
  endOfAudio = false;
  stop: ReplyStop = 'length';

  constructor(c: ModelConfig, arena: Arena, o: DialogueOptions & { seed: number; prompts: Prompts; clocks: StageClocks }) {
    this.config = c;
    const checkpoints = o.checkpoints ?? 0;
    if (!Number.isInteger(checkpoints) || checkpoints < 0 || checkpoints > 4096)
      throw new ArgumentError(`dialogue checkpoints must be 0..4096, got ${checkpoints}`);
    this.options = Object.freeze({
      context: o.context,
      kv: o.kv,
      prefillChunk: o.prefillChunk,
      maxFrames: o.maxFrames,
      text: o.text,
      audio: o.audio,
      checkpoints,
      speculative: o.speculative ?? false,
    });
    this.state = new BackboneState(c, arena, o.context, o.context, '', o.kv);
    this.codes = arena.carve('codes', 'workspace.sampler', Int32Array, c.audio.codebooks);
    this.sampler = new Sampler(o.seed, arenaWorkspace(arena, 'workspace.sampler', 'dialogue'));
    this.prompts = o.prompts;
    this.keep = o.prompts.system.length;
    this.clocks = o.clocks;
    let convFloats = 0;
    for (const conv of this.state.conv) convFloats += conv === null ? 0 : conv.length;
    this.convFloats = convFloats;
    this.ckMeta = arena.carve('barge.meta', 'metadata', Int32Array, checkpoints * CK_FIELDS);
    this.ckConv = arena.carve('barge.conv', 'recurrence', Float32Array, checkpoints * convFloats);
    this.ckCodes = arena.carve('barge.codes', 'metadata', Int32Array, checkpoints * c.audio.codebooks);
    for (let k = 0; k < checkpoints; k++) this.ckMeta[k * CK_FIELDS + CK_FRAME] = -1;
    this.systemConv = arena.carve('system.conv', 'recurrence', Float32Array, convFloats);
    const marks = this.options.speculative ? 1 : 0;
    this.markMeta = arena.carve('speculation.meta', 'metadata', Int32Array, marks * CK_FIELDS);
    this.markConv = arena.carve('speculation.conv', 'recurrence', Float32Array, marks * convFloats);
    this.markCodes = arena.carve('speculation.codes', 'metadata', Int32Array, marks * c.audio.codebooks);
  }

  protected tic(): void {
    this.watch.tic();
  }

  protected toc(clock: number): void {
    this.watch.toc(this.clocks, clock);
  }

  /** True once the whole system prompt has run (see `prefillSystem`). */
  get systemDone(): boolean {
    return this.systemAt === this.prompts.system.length;
  }

  /** The short-conv states into `saved` from `at`, layer after layer (convFloats floats). */
  protected saveConv(saved: Float32Array, at: number): void {
    const conv = this.state.conv;
    for (let l = 0; l < conv.length; l++) {
      const s = conv[l];
      if (s === null || s === undefined) continue;
      native.copyF32(s, 0, saved, at, s.length);
      at += s.length;
    }
  }

  /** The short-conv states back from `saved` at `at` (as saveConv wrote them). */
  protected loadConv(saved: Float32Array, at: number): void {
    const conv = this.state.conv;
    for (let l = 0; l < conv.length; l++) {
      const s = conv[l];
      if (s === null || s === undefined) continue;
      native.copyF32(saved, at, s, 0, s.length);
      at += s.length;
    }
  }

  /** Keeps what a reply stopped right after this frame would hold. */
  protected checkpoint(): void {
    const k = this.frames % this.options.checkpoints;
    this.save(this.ckMeta, k * CK_FIELDS, this.ckConv, k * this.convFloats, this.ckCodes, k * this.config.audio.codebooks);
  }

  /** The turn state into `meta` at `m`, the short-conv states into `conv` at `at`, the last frame into `codes` at `ca`. */
  protected save(meta: Int32Array, m: number, conv: Float32Array, at: number, codes: Int32Array, ca: number): void {
    meta[m + CK_FRAME] = this.frames;
    meta[m + CK_POSITION] = this.state.position;
    meta[m + CK_SAMPLER] = this.sampler.state | 0;
    meta[m + CK_TEXT] = this.atText ? 1 : 0;
    meta[m + CK_LEFT] = this.left;
    meta[m + CK_TEXT_DONE] = this.textDone ? 1 : 0;
    meta[m + CK_STEP] = this.stepAt;
    meta[m + CK_TEXT_TOKENS] = this.textTokens;
    meta[m + CK_END_OF_AUDIO] = this.endOfAudio ? 1 : 0;
    meta[m + CK_DROPPED] = this.dropped;
    meta[m + CK_PENDING] = this.pending;
    meta[m + CK_TOKEN] = this.token;
    meta[m + CK_TURNS] = this.turns;
    meta[m + CK_USER_FRAMES] = this.userFrames;
    meta[m + CK_MAX_STEPS] = this.maxSteps;
    meta[m + CK_MAX_FRAMES] = this.maxFrames;
    meta[m + CK_STOP] = STOPS.indexOf(this.stop);
    this.saveConv(conv, at);
    // Element copies, not subarray views: this runs in a stage that allocates nothing.
    const cb = this.config.audio.codebooks;
    for (let i = 0; i < cb; i++) codes[ca + i] = this.codes[i]!;
  }

  /** What `save` kept, back: the generation state, the position, the short-conv states and the last frame. */
  protected load(meta: Int32Array, m: number, conv: Float32Array, at: number, codes: Int32Array, ca: number): void {
    this.state.position = meta[m + CK_POSITION]!;
    this.sampler.state = meta[m + CK_SAMPLER]! >>> 0;
    this.atText = meta[m + CK_TEXT] === 1;
    this.left = meta[m + CK_LEFT]!;
    this.textDone = meta[m + CK_TEXT_DONE] === 1;
    this.textTokens = meta[m + CK_TEXT_TOKENS]!;
    this.endOfAudio = meta[m + CK_END_OF_AUDIO] === 1;
    this.frames = meta[m + CK_FRAME]!;
    this.loadConv(conv, at);
    const cb = this.config.audio.codebooks;
    for (let i = 0; i < cb; i++) this.codes[i] = codes[ca + i]!;
  }

  /**
   * Speculation: keeps what this dialogue holds now (between turns) so that `rollback` can
   * return to it after a turn staged and a reply generated ahead that the endpoint does not
   * confirm. Only a turn that `fits` may follow: a compaction would move the positions the
   * mark names.
   */
  mark(): void {
    if (!this.options.speculative || this.maxSteps !== 0 || this.staged !== 0)
      throw new InternalError('dialogue: mark outside a speculative dialogue between turns');
    this.save(this.markMeta, 0, this.markConv, 0, this.markCodes, 0);
    this.marked = true;
  }

  /**
   * True when a turn of `rows` adapter rows and a reply of `steps` steps fit in the context with
   * no compaction (the system prompt has run): what a turn that may be rolled back needs.
   */
  fits(rows: number, steps: number): boolean {
    if (!this.systemDone) return false;
    const p = this.prompts;
    const staged = (this.pending > 0 ? 1 : 0) + (this.turns > 0 ? p.replyClose.length : 0) + p.userOpen.length + rows + p.userClose.length;
    return this.state.position + staged + steps <= this.state.context;
  }

  /**
   * Returns to the `mark`: the turn staged since and its reply are forgotten, bit for bit (the
   * cache rows written past the marked position are dead: attention never reads them). The
   * barge-in checkpoints are dropped: the speculative reply overwrote some, and the last
   * reply's onset was judged before the turn that was marked began.
   */
  rollback(): void {
    if (!this.marked) throw new InternalError('dialogue: rollback without a mark');
    const meta = this.markMeta;
    if (meta[CK_DROPPED] !== this.dropped) throw new InternalError('dialogue: a compaction since the mark');
    this.load(meta, 0, this.markConv, 0, this.markCodes, 0);
    this.stepAt = meta[CK_STEP]!;
    this.pending = meta[CK_PENDING]!;
    this.token = meta[CK_TOKEN]!;
    this.turns = meta[CK_TURNS]!;
    this.userFrames = meta[CK_USER_FRAMES]!;
    this.maxSteps = meta[CK_MAX_STEPS]!;
    this.maxFrames = meta[CK_MAX_FRAMES]!;
    this.stop = STOPS[meta[CK_STOP]!]!;
    this.staged = 0;
    this.marked = false;
    for (let k = 0; k < this.options.checkpoints; k++) this.ckMeta[k * CK_FIELDS + CK_FRAME] = -1;
  }

  /** The mark is not needed any more: the speculative turn is the turn. */
  confirm(): void {
    this.marked = false;
  }

  /**
   * Barge-in: ends the reply as if it had stopped right after audio frame `heard` (1-based; the
   * frames the listener heard), forgetting every position generated after it. False, changing
   * nothing, when that frame's checkpoint is not kept (older than the last `checkpoints` frames,
   * not generated, or forgotten by a compaction). After it the turn is over (`stop` is
   * 'interrupted') and the frame is fed back first at the next user turn.
   */
  truncate(heard: number): boolean {
    const n = this.options.checkpoints;
    if (n === 0 || heard < 1 || heard > this.frames) return false;
    const k = heard % n;
    const m = k * CK_FIELDS;
    const meta = this.ckMeta;
    if (meta[m + CK_FRAME] !== heard || meta[m + CK_DROPPED] !== this.dropped) return false;
    this.load(meta, m, this.ckConv, k * this.convFloats, this.ckCodes, k * this.config.audio.codebooks);
    this.pending = 2;
    this.stop = 'interrupted';
    if (this.maxSteps !== 0) {
      this.turns++;
      this.stepAt = this.maxSteps = 0;
    }
    return true;
  }

  /**
   * Cancels the reply in progress: its next step ends the turn (`stop` is 'interrupted') with
   * what it generated so far, kept in the context as a reply stopped for length is. Nothing
   * when no reply is in progress.
   */
  cancel(): void {
    if (this.maxSteps === 0) return;
    this.stop = 'interrupted';
    this.maxSteps = this.stepAt;
  }

  protected done(): number {
    // A reply stopped for length keeps its last token or frame pending; one ended by
    // <|im_end|> has nothing left to feed back.
    if (this.stop === 'end-of-turn') this.pending = 0;
    this.turns++;
    this.stepAt = this.maxSteps = 0;
    return EMIT_DONE;
  }

  /** Backbone positions in the cache. */
  get position(): number {
    return this.state.position;
  }
}
