/**
 * The backbone side of one conversation, one step at a time (docs/model.md, Prompt and generation):
 * it stages the prompt and the user's adapter rows for prefill, then generates the reply as
 * a sequence of `step()` calls, each one backbone position. Used the same way by the
 * single-thread `Conversation` and by the pipeline's Depthformer stage, so both follow one
 * copy of the rules.
 *
 * Generation (liquid-audio's interleaved rules): a counter decremented before each backbone
 * step; text for 6 steps, then 12 audio frames, alternating; `<|text_end|>` ends text for the
 * turn (audio continues); `<|im_end|>` ends the turn and is not emitted; end of audio is judged
 * on codebook 0 = 2048, the whole frame becomes 2048, is fed back, and text resumes. Every
 * emitted token or frame is fed back as the next position.
 *
 * Barge-in: with `checkpoints` > 0, the dialogue keeps, for each of the last `checkpoints` audio
 * frames of a reply, what a conversation stopped right after that frame would hold (its
 * position, short-conv states, sampler state and the frame itself, pending). `truncate(h)`
 * returns to the checkpoint of frame h: the reply then ends as if it had only ever generated
 * its first h frames and the text interleaved before them (KV rows past the position are dead:
 * attention never reads them). Memory: [checkpoints][short-conv floats + codebooks + fields].
 *
 * System prompt: a dialogue that ran it keeps the short-conv state at its end; another dialogue
 * of the same model and prompts then copies it (`copySystem`: that state and the cache rows of
 * the prompt, which the context policy never moves) instead of running it again, with the
 * same bits.
 *
 * Context policy: when the next positions would pass the context, the oldest quarter of the
 * positions after the system prompt are forgotten (Lfm2Stack.dropPositions).
 *
 * A pass slot (`StepSlot`, ticket scratch) holds the staged rows and the last hidden state: a
 * dialogue must keep the same slot from `beginUser` until its reply's first `step`. Later steps
 * may run on any slot: each embeds the token or frame it feeds back (kept here) into its slot
 * first. What must outlive the turn (the last emitted token or frame when a reply stops for
 * length) is kept here too and staged again at the next turn.
 *
 * Thread contract: one thread, one call at a time. After construction nothing allocates; the
 * stage clocks read the native monotonic clock.
 */
import { native } from '../native.js';
import { InternalError } from '../errors.js';
import type { BackboneState } from '../model/blocks/backbone.js';
import type { StepSlot } from './step.js';
import { END_OF_AUDIO } from '../model/blocks/depthformer.js';
import type { Sampler, SamplingOptions } from '../model/blocks/sampler.js';
import { TOKENS } from '../model/format/tokenizer.js';
import './categories.js';
import { CLOCK_AUDIO, CLOCK_DEPTHFORMER, CLOCK_PREFILL, CLOCK_TEXT } from './clock.js';
import { CK_FIELDS, CK_FRAME, CK_POSITION, EMIT_DONE, EMIT_END_OF_AUDIO, EMIT_FRAME, EMIT_TEXT, ReplyState } from './reply-state.js';

export { EMIT_DONE, EMIT_END_OF_AUDIO, EMIT_FRAME, EMIT_NONE, EMIT_TEXT, type DialogueOptions, type Prompts, type ReplyStop } from './reply-state.js';

/** Samplers and options of the audio rows of one `stepRows` (kept here: nothing is allocated per step). */
const ROW_SAMPLERS: Sampler[] = [];
const ROW_OPTIONS: SamplingOptions[] = [];
const ROW_CODES: Int32Array[] = [];

/** How long the capacity calibration runs frames untimed before it times any. */
const CALIBRATION_WARM_MS = 300;

/** Inspection taps of a step (slower: set them only to dump stages). */
export interface StepTaps {
  hidden?(row: Float32Array): void;
  textLogits?(logits: Float32Array): void;
  audioLogits?(logits: Float32Array): void;
}

export class Dialogue extends ReplyState {
  /**
   * Prefills the next positions of the system prompt on `slot`, at most one prefill chunk, so
   * that a conversation runs its system prompt when it opens and its first user turn only
   * prefills its own rows. Call it before the first `beginUser` until it returns true (what is
   * left then runs with the first turn). The bits are those of prefilling it with the first
   * turn: a position's prefill does not depend on how positions are grouped into chunks.
   */
  prefillSystem(slot: StepSlot): boolean {
    if (this.systemDone) return true;
    this.tic();
    const ids = this.prompts.system;
    const end = Math.min(ids.length, this.systemAt + this.options.prefillChunk);
    this.staged = 0;
    this.#stageTokens(slot, ids, this.systemAt, end);
    if (this.staged > 0) this.#flush(slot);
    this.systemAt = end;
    if (this.systemDone) {
      this.saveConv(this.systemConv, 0);
      this.savedSystem = true;
    }
    this.toc(CLOCK_PREFILL);
    return this.systemDone;
  }

  /** True once the system prompt has been run (or copied) alone: this dialogue can give it (`copySystem`). */
  get systemSaved(): boolean {
    return this.savedSystem;
  }

  /** True while the system prompt is part way through `prefillSystem`. */
  get systemRunning(): boolean {
    return this.systemAt > 0 && !this.systemDone;
  }

  /**
   * Takes the system prompt from `donor` instead of running it: the cache rows of its positions
   * and the short-conv state at its end, which are the bits running it here would give (the
   * same model, prompts and cache type; a position's prefill does not depend on what follows
   * it). False, with nothing changed, unless this dialogue has run nothing yet and `donor` has
   * saved the same system prompt.
   */
  copySystem(donor: Dialogue): boolean {
    const ids = this.prompts.system;
    const theirs = donor.prompts.system;
    if (donor === this || this.systemAt !== 0 || this.state.position !== 0 || !donor.savedSystem) return false;
    if (donor.config !== this.config || donor.state.kv !== this.state.kv || theirs.length !== ids.length) return false;
    for (let i = 0; i < ids.length; i++) if (theirs[i] !== ids[i]) return false;
    this.tic();
    const b = this.config.backbone;
    const n = ids.length * b.kvHeads * b.headDim;
    for (let l = 0; l < this.state.k.length; l++) {
      const k = this.state.k[l];
      const v = this.state.v[l];
      if (k === null || v === null || k === undefined || v === undefined) continue;
      copyRows(donor.state.k[l]!, k, n);
      copyRows(donor.state.v[l]!, v, n);
    }
    native.copyF32(donor.systemConv, 0, this.systemConv, 0, this.convFloats);
    this.loadConv(this.systemConv, 0);
    this.state.position = ids.length;
    this.systemAt = ids.length;
    this.savedSystem = true;
    this.toc(CLOCK_PREFILL);
    return true;
  }

  /** Opens a user turn on `slot`: the system prompt (what has not run of it) or the close of the last reply, then `<|im_start|>user\n`. */
  beginUser(slot: StepSlot): void {
    this.tic();
    const bb = slot.backbone;
    this.staged = 0;
    this.userFrames = 0;
    if (this.pending === 1) bb.embedText(this.token, bb.stack.input, this.staged++);
    else if (this.pending === 2) bb.embedAudio(this.codes, bb.stack.input, this.staged++);
    this.pending = 0;
    if (!this.systemDone) {
      this.#stageTokens(slot, this.prompts.system, this.systemAt);
      this.systemAt = this.prompts.system.length;
    } else if (this.turns > 0) {
      this.#stageTokens(slot, this.prompts.replyClose);
    }
    this.#stageTokens(slot, this.prompts.userOpen);
    this.toc(CLOCK_PREFILL);
  }

  /** True when the next `step()` runs staged prompt rows (a turn's last prefill chunk) before its head. */
  get prefilling(): boolean {
    return this.maxSteps !== 0 && this.stepAt === 0 && this.staged > 0;
  }

  /** True when staging `frames` more adapter rows runs a prefill chunk (`pushRows` would compute). */
  runsChunk(frames: number): boolean {
    return this.staged + frames >= this.options.prefillChunk;
  }

  /** Stages `frames` adapter rows of `rows` (hidden wide) from row `at`; full chunks run at once. True if one ran. */
  pushRows(slot: StepSlot, rows: Float32Array, at: number, frames: number): boolean {
    let ran = false;
    this.tic();
    const D = this.config.backbone.hidden;
    const input = slot.backbone.stack.input;
    this.userFrames += frames;
    for (let t = 0; t < frames; t++) {
      // A native copy: this runs a few times per turn, often in unoptimised code.
      native.copyF32(rows, (at + t) * D, input, this.staged * D, D);
      this.staged++;
      if (this.staged === this.options.prefillChunk) {
        this.#flush(slot);
        ran = true;
      }
    }
    this.toc(CLOCK_PREFILL);
    return ran;
  }

  /**
   * Closes the user turn (`<|im_end|>\n<|im_start|>assistant\n`) and readies the reply, of at
   * most `maxFrames` audio frames (the dialogue's own limit by default, never more).
   */
  endUser(slot: StepSlot, maxFrames = this.options.maxFrames): void {
    this.tic();
    this.#stageTokens(slot, this.prompts.userClose);
    this.toc(CLOCK_PREFILL);
    this.atText = true;
    this.left = this.config.interleave.text;
    this.textDone = false;
    this.stepAt = 0;
    this.maxFrames = Math.max(0, Math.min(maxFrames, this.options.maxFrames));
    this.maxSteps = 2 * this.maxFrames + 4 * this.config.interleave.text + 64;
    this.textTokens = 0;
    this.frames = 0;
    this.endOfAudio = false;
    this.stop = 'length';
    for (let k = 0; k < this.options.checkpoints; k++) this.ckMeta[k * CK_FIELDS + CK_FRAME] = -1;
  }

  #stageTokens(slot: StepSlot, ids: Int32Array, from = 0, to = ids.length): void {
    const bb = slot.backbone;
    for (let i = from; i < to; i++) {
      bb.embedText(ids[i]!, bb.stack.input, this.staged);
      this.staged++;
      if (this.staged === this.options.prefillChunk) this.#flush(slot);
    }
  }

  /** Runs the staged rows; leaves the last row's hidden state in row 0 of the hidden plane. */
  #flush(slot: StepSlot): Float32Array {
    const n = this.staged;
    const stack = slot.backbone.stack;
    this.#makeRoom(slot, n);
    const hidden = stack.forward(this.state, n, null, true);
    const D = this.config.backbone.hidden;
    if (n > 1) hidden.copyWithin(0, (n - 1) * D, n * D);
    this.staged = 0;
    return hidden;
  }

  #makeRoom(slot: StepSlot, n: number): void {
    const s = this.state;
    if (s.position + n <= s.context) return;
    const drop = Math.min(s.position - this.keep, Math.max(n + s.position - s.context, Math.ceil((s.context - this.keep) / 4)));
    slot.backbone.stack.dropPositions(s, this.keep, drop);
    // Checkpoints move with the positions they name; one whose positions were forgotten is gone.
    for (let k = 0; k < this.options.checkpoints; k++) {
      const m = k * CK_FIELDS;
      if (this.ckMeta[m + CK_FRAME]! < 0) continue;
      const p = this.ckMeta[m + CK_POSITION]! - drop;
      if (p < this.keep) this.ckMeta[m + CK_FRAME] = -1;
      else this.ckMeta[m + CK_POSITION] = p;
    }
    this.dropped += drop;
    this.compactions++;
  }

  /**
   * One backbone position of the reply (the first runs the staged prompt rows). Returns what
   * it emitted; EMIT_DONE once the turn is over (then the slot may be given back).
   */
  step(slot: StepSlot, taps: StepTaps | null = null): number {
    if (this.maxSteps === 0) return EMIT_DONE;
    if (this.stepAt >= this.maxSteps || this.frames >= this.maxFrames) return this.done();
    const stack = slot.backbone.stack;
    this.tic();
    let hidden: Float32Array;
    // The prompt's last chunk may have run already (its positions ended on a chunk): its last
    // hidden state is in row 0 of the plane.
    if (this.stepAt === 0) hidden = this.staged > 0 ? this.#flush(slot) : stack.hiddenRows;
    else {
      this.#makeRoom(slot, 1);
      this.#feedBack(slot, 0);
      hidden = stack.forward(this.state, 1);
    }
    return this.#afterBackbone(slot, hidden, taps, false, slot.logits);
  }

  /** The token or frame the last step emitted, embedded as row `row` of `slot`'s input. */
  #feedBack(slot: StepSlot, row: number): void {
    const bb = slot.backbone;
    if (this.pending === 1) bb.embedText(this.token, bb.stack.input, row);
    else bb.embedAudio(this.codes, bb.stack.input, row);
  }

  /** True when the next `step()` is one single-position backbone step: what `stepRows` batches. */
  get batchable(): boolean {
    return this.maxSteps !== 0 && this.stepAt > 0 && this.stepAt < this.maxSteps && this.frames < this.maxFrames;
  }

  /**
   * The next step of each of `m` `batchable` dialogues `ds` (at most `slot.rows`) at once, on
   * `slot`: one batched backbone call (Lfm2Stack.forwardRows: each weight block is read once for
   * all m positions), then the text heads of those at text in one call (`Backbone.logitsRows`)
   * and the frames of those at audio in one (`Depthformer.frameRows`). Every bit is what m
   * `step` calls give one after the other. `ds` is reordered (those at text first); `states`
   * is a caller-kept array of at least m; what ds[r] emitted goes to `emitted[r]`. Returns how
   * many were at text. The shared calls are on the first dialogue's clock.
   */
  static stepRows(ds: Dialogue[], m: number, slot: StepSlot, states: BackboneState[], emitted: Int32Array): number {
    if (m < 1 || m > slot.rows) throw new InternalError(`stepRows: ${m} dialogues on a slot of ${slot.rows} rows`);
    let text = 0;
    for (let r = 0; r < m; r++) {
      const d = ds[r]!;
      if (!d.batchable) throw new InternalError('stepRows: a dialogue that is not batchable');
      if (d.atText) {
        ds[r] = ds[text]!;
        ds[text++] = d;
      }
    }
    const first = ds[0]!;
    first.tic();
    for (let r = 0; r < m; r++) {
      const d = ds[r]!;
      d.#makeRoom(slot, 1);
      d.#feedBack(slot, r);
      states[r] = d.state;
    }
    const hidden = slot.backbone.stack.forwardRows(states, m);
    if (text > 0) slot.backbone.logitsRows(hidden, slot.logits, text, slot.logitsScratch);
    if (text < m) {
      for (let r = text; r < m; r++) {
        const d = ds[r]!;
        ROW_SAMPLERS[r - text] = d.sampler;
        ROW_OPTIONS[r - text] = d.options.audio;
        ROW_CODES[r - text] = d.codes;
      }
      slot.depthformer.frameRows(slot.hiddenFrom[text]!, m - text, ROW_SAMPLERS, ROW_OPTIONS, ROW_CODES);
    }
    for (let r = 0; r < m; r++) {
      const d = ds[r]!;
      if (r > 0) d.tic();
      emitted[r] = d.#afterBackbone(slot, slot.hiddenFrom[r]!, null, true, r < text ? slot.logitsRows[r]! : slot.logits);
    }
    return text;
  }

  /**
   * The rest of a step once the backbone has run: text head and sampling, or the Depthformer
   * frame. With `headsDone` a several-row step has already run this dialogue's text head (its
   * logits in `logits`) or its frame (its codes in `codes`).
   */
  #afterBackbone(slot: StepSlot, hidden: Float32Array, taps: StepTaps | null, headsDone: boolean, logits: Float32Array): number {
    const c = this.config;
    const first = this.stepAt === 0;
    this.stepAt++;
    this.left--;
    if (this.atText) {
      if (!headsDone) slot.backbone.logits(hidden, logits, slot.logitsScratch);
      this.toc(first ? CLOCK_PREFILL : CLOCK_TEXT);
      if (taps !== null) {
        taps.hidden?.(hidden);
        taps.textLogits?.(logits);
      }
      const token = this.sampler.sample(logits, c.backbone.vocab, this.options.text);
      if (token === TOKENS.imEnd) {
        this.stop = 'end-of-turn';
        return this.done();
      }
      this.token = token;
      this.textTokens++;
      if (token === TOKENS.textEnd) this.textDone = true;
      if (this.left <= 0 || this.textDone) {
        this.atText = false;
        this.left = c.interleave.audio;
      }
      this.pending = 1;
      return EMIT_TEXT;
    }
    this.toc(first ? CLOCK_PREFILL : CLOCK_AUDIO);
    if (taps !== null) taps.hidden?.(hidden);
    this.tic();
    const inspect = taps !== null && taps.audioLogits !== undefined;
    if (!headsDone) slot.depthformer.frame(hidden, this.sampler, this.options.audio, this.codes, inspect ? slot.audioLogits : null);
    this.toc(CLOCK_DEPTHFORMER);
    if (inspect) taps.audioLogits!(slot.audioLogits);
    this.frames++;
    if (this.left <= 0 && !this.textDone) {
      this.atText = true;
      this.left = c.interleave.text;
    }
    let emitted = EMIT_FRAME;
    if (this.codes[0] === END_OF_AUDIO) {
      this.codes.fill(END_OF_AUDIO);
      this.atText = true;
      this.endOfAudio = true;
      emitted = EMIT_END_OF_AUDIO;
    }
    this.pending = 2;
    if (this.options.checkpoints > 0) this.checkpoint();
    return emitted;
  }

  /**
   * One generated frame of m conversations at once, for each m in `rows` (at most the slot's
   * rows): a batched audio step (backbone and Depthformer frames) plus the text steps' share of a
   * frame (backbone and text heads), each the best of a few runs, in ms, with this dialogue's
   * state standing in for all m rows at a mid-length context (capacity calibration). It moves
   * the position and the sampler: calibrate on a conversation opened for it.
   */
  calibrateFrames(slot: StepSlot, rows: readonly number[]): number[] {
    const st = this.state;
    const most = Math.min(slot.rows, Math.max(...rows));
    const states = Array.from({ length: most }, () => st);
    const samplers = states.map(() => this.sampler);
    const options = states.map(() => this.options.audio);
    const codes = states.map(() => this.codes);
    const at = Math.max(0, Math.min(256, st.rows - most - 1, st.context - most - 1));
    const stack = slot.backbone.stack;
    const textShare = this.config.interleave.text / this.config.interleave.audio;
    // The best of at least three runs, more while they are short (a small model's take microseconds).
    const best = (run: () => void): number => {
      let ms = Infinity;
      const until = performance.now() + 10;
      for (let k = 0; k < 3 || (k < 16 && performance.now() < until); k++) {
        st.position = at;
        const t = performance.now();
        run();
        ms = Math.min(ms, performance.now() - t);
      }
      return ms;
    };
    // Untimed frames first: right after start-up a frame runs up to twice as slow for a few
    // hundred milliseconds, which the best of a few runs does not leave behind.
    const warm = performance.now() + CALIBRATION_WARM_MS;
    for (let k = 0; k < 64 && performance.now() < warm; k++) {
      st.position = at;
      slot.depthformer.frameRows(stack.forwardRows(states, 1), 1, samplers, options, codes);
    }
    return rows.map((m) => {
      if (m < 1 || m > most) throw new InternalError(`calibration: cannot time ${m} rows on a slot of ${slot.rows}`);
      const audio = best(() => slot.depthformer.frameRows(stack.forwardRows(states, m), m, samplers, options, codes));
      const text = best(() => slot.backbone.logitsRows(stack.forwardRows(states, m), slot.logits, m, slot.logitsScratch));
      return audio + textShare * text;
    });
  }
}

/** dst[0, n) = src[0, n) for two caches of one type (f32 natively; f16 element by element). */
function copyRows(src: Float32Array | Uint16Array, dst: Float32Array | Uint16Array, n: number): void {
  if (src instanceof Float32Array && dst instanceof Float32Array) {
    native.copyF32(src, 0, dst, 0, n);
    return;
  }
  for (let i = 0; i < n; i++) dst[i] = src[i]!;
}
