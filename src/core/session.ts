/**
 * A full-duplex conversation on a duplex device, on one thread, period by period of the device
 * clock: the reference for the pipeline's duplex stages, and what runs the loopback scenarios
 * deterministically and faster than real time.
 *
 *   device period → capture: microphone and far end (what was played in the same period) to
 *   16 kHz, echo cancellation → VAD and endpointing per 10 ms → the user's segment (with a
 *   pre-roll before the onset) into the conversation → at the end of speech the reply is
 *   generated a position at a time, at most `lookaheadMs` of audio ahead of playback → the
 *   playback queue → the device.
 *
 * Barge-in: the first sign of speech while the assistant talks pauses playback (a FADE_MS fade;
 * the queue holds its place); if the endpointer takes it back, playback resumes where it
 * paused; once speech is confirmed, the reply is cut to the frames the listener heard
 * (Conversation.truncateReply) and its unplayed audio dropped. Until the echo canceller has
 * converged, nothing heard while the far end plays counts as the user.
 *
 * Thread contract: one thread. Everything is made at construction; `tick` allocates nothing.
 */
import { ArgumentError } from '../errors.js';
import { defaultOf, optionValue } from '../options.js';
import { Resampler } from '../dsp/resample.js';
import { APM_HEAP_BOUND, APM_RATE, EchoCanceller, type ApmEngine } from '../dsp/aec.js';
import type { FrameDecider } from '../dsp/voice.js';
import { prepareVoice } from '../io/silero.js';
import { makeVoice, maxDecisions, type VadChoice } from '../dsp/voice.js';
import { arenaWorkspace } from '../dsp/workspace.js';
import { sizedArenas } from '../memory/sizing.js';
import type { Arena } from '../memory/arena.js';
import type { NativeHold } from '../memory/domain.js';
import { native } from '../native.js';
import './categories.js';
import { type Endpointer, VAD_SPEECH_END, VAD_SPEECH_MAYBE, VAD_SPEECH_START } from '../duplex/turn.js';
import { TurnTaking } from '../duplex/turns.js';
import { GATE_DISCARD, GATE_END, GATE_NONE, GATE_ROWS } from '../duplex/gate.js';
import { keptFrames } from '../duplex/bargein.js';
import { checkFadeMs, FADE_MS, Fader } from '../duplex/fader.js';
import { MelFrontend } from '../dsp/mel.js';
import { melRows, segmentSamples } from '../model/plan/plans.js';
import { EMIT_DONE } from './dialogue.js';
import { checkpointsFor, frameSamplesAt } from './frames.js';
import type { ModelConfig } from '../model/format/config.js';
import type { Conversation, ReplySink } from './conversation.js';

/** A device that plays and captures in lockstep, a period at a time (io/loopback.ts). */
export interface DuplexDevice {
  readonly rate: number;
  readonly period: number;
  /** The delay it reports between a played sample and its echo, ms. */
  readonly latencyMs: number;
  /** Samples played (and captured) so far: the device clock. */
  readonly clock: number;
  tick(played: Float32Array, mic: Float32Array, far: Float32Array): void;
}

export interface DuplexOptions {
  silenceMs?: number;
  onsetMs?: number;
  minSpeechMs?: number;
  vad?: VadChoice;
  lookaheadMs?: number;
  /** Fade length when playback pauses or stops, ms. Default FADE_MS (10). */
  fadeMs?: number;
}

/** What the session tells its listener (all optional; called on the session's thread). */
export interface DuplexEvents {
  speechStart?(clock: number): void;
  speechEnd?(clock: number): void;
  /** Confirmed barge-in: the reply was cut to `heard` frames (false: nothing was playing). */
  bargeIn?(clock: number, heard: number): void;
  text?(token: number): void;
  /** The first sample of a reply reached the device. */
  replyStart?(clock: number): void;
  replyEnd?(clock: number): void;
  /** Every endpointer event (VAD_* in dsp/vad.ts). */
  endpoint?(clock: number, event: number): void;
}

const NO_SINK: ReplySink = {};

export class DuplexSession {
  readonly conversation: Conversation;
  readonly device: DuplexDevice;
  readonly aec: EchoCanceller;
  readonly vad: FrameDecider;
  readonly endpointer: Endpointer;
  /** The raw log-mel rows of everything heard; turn-taking routes the user's segments (duplex/turns.ts). */
  readonly #mel: MelFrontend;
  readonly #turns: TurnTaking;
  /** Counters. */
  pauses = 0;
  bargeIns = 0;
  turns = 0;
  replies = 0;
  underruns = 0;
  /** The loudest microphone sample of the last period (a level meter's input). */
  inputPeak = 0;
  /** Samples of the current reply the device has played. */
  played = 0;
  readonly #events: DuplexEvents;
  readonly #holds: NativeHold<ApmEngine>[];
  readonly #arena: Arena;
  #closed = false;
  readonly #micIn: Resampler;
  readonly #farIn: Resampler;
  readonly #buf: {
    played: Float32Array;
    mic: Float32Array;
    far: Float32Array;
    mic16: Float32Array;
    far16: Float32Array;
    clean: Float32Array;
    rows: Float32Array; // [rows one period completes][nMels]
    decisions: Uint8Array;
  };
  readonly #queue: Float32Array; // ring of device-rate reply samples
  #qHead = 0;
  #qCount = 0;
  readonly #lookahead: number; // samples
  readonly #frameSamples: number; // device samples per reply frame
  readonly #fader: Fader;
  #replying = false;
  #replyDone = false;
  #replyStarted = false;
  readonly #sink: ReplySink;

  constructor(conversation: Conversation, device: DuplexDevice, o: DuplexOptions = {}, events: DuplexEvents = {}) {
    const c = conversation.model.config;
    if (conversation.inputRate !== APM_RATE) throw new ArgumentError(`a duplex conversation takes ${APM_RATE} Hz input, this one ${conversation.inputRate} Hz`);
    if (device.rate !== conversation.model.options.outputRate)
      throw new ArgumentError(`the device plays at ${device.rate} Hz but the conversation speaks at ${conversation.model.options.outputRate} Hz`);
    const silence = optionValue<number>('silenceMs', o.silenceMs);
    const onset = optionValue<number>('onsetMs', o.onsetMs);
    const minSpeech = optionValue<number>('minSpeechMs', o.minSpeechMs);
    const lookaheadMs = optionValue<number>('lookaheadMs', o.lookaheadMs);
    const fadeMs = checkFadeMs(o.fadeMs ?? FADE_MS);
    this.conversation = conversation;
    this.device = device;
    this.#events = events;
    // Everything the session uses is held under the cap, by `session/<conversation index>`:
    // the engines' host heap first (measured as they are made), then one arena for the rest.
    const domain = conversation.model.domain;
    const owner = domain.owner('session', conversation.index);
    const aecOptions = { delayMs: Math.min(500, Math.round(device.latencyMs)) };
    const voice = prepareVoice(optionValue<string>('vad', o.vad));
    const holds: NativeHold<ApmEngine>[] = [];
    try {
      // Each engine is held under the cap at its bound before it is made.
      const engines: [number, () => ApmEngine, string][] = [[APM_HEAP_BOUND.echo, () => EchoCanceller.engine(aecOptions), 'the echo canceller']];
      if (voice.kind === 'webrtc') engines.push([voice.bound, voice.engine, 'the VAD']);
      for (const [bound, make, what] of engines) holds.push(domain.holdNative(owner, 'native.audio', bound, make, () => bound, what));
      this.#holds = holds;
      const frameSamples = frameSamplesAt(c, device.rate);
      const lookahead = Math.max(frameSamples, Math.round((lookaheadMs * device.rate) / 1000));
      const { value, arenas } = sizedArenas(domain, [{ owner, name: `session ${conversation.index}` }], 1 << 28, ([arena]) => {
        const a = arena!;
        const capture = arenaWorkspace(a, 'capture', 'duplex');
        const aec = new EchoCanceller(aecOptions, capture, holds[0]!.value);
        const vad = makeVoice(voice, capture, holds[1]?.value ?? null);
        const f = c.frontend;
        const maxRows = melRows(c, segmentSamples(c, conversation.model.options.segmentSeconds));
        const micIn = new Resampler(device.rate, APM_RATE, {}, arenaWorkspace(a, 'capture', 'duplex.mic'));
        const farIn = new Resampler(device.rate, APM_RATE, {}, arenaWorkspace(a, 'capture', 'duplex.far'));
        const m16 = micIn.maxOutput(device.period) + 2;
        const front = arenaWorkspace(a, 'workspace.frontend', 'duplex');
        const mel = new MelFrontend({ sampleRate: f.sampleRate, nFft: f.nFft, winLength: f.winLength, hop: f.hop, nMels: f.nMels }, front);
        const rowsPer = Math.ceil(aec.maxOutput(m16) / f.hop) + 4;
        const turns = new TurnTaking(
          { onsetMs: onset, silenceMs: silence, minSpeechMs: minSpeech, hangover: vad.hangover, width: f.nMels, maxRows, rowsPerPush: rowsPer },
          capture,
          front,
        );
        return {
          aec,
          vad,
          turns,
          micIn,
          farIn,
          mel,
          buf: {
            played: a.carve('duplex.played', 'playback.payload', Float32Array, device.period),
            mic: a.carve('duplex.mic', 'capture', Float32Array, device.period),
            far: a.carve('duplex.far', 'capture', Float32Array, device.period),
            mic16: a.carve('duplex.mic16', 'capture', Float32Array, m16),
            far16: a.carve('duplex.far16', 'capture', Float32Array, m16),
            clean: a.carve('duplex.clean', 'capture', Float32Array, aec.maxOutput(m16)),
            rows: a.carve('duplex.rows', 'workspace.frontend', Float32Array, rowsPer * f.nMels),
            decisions: a.carve('duplex.decisions', 'metadata', Uint8Array, maxDecisions(voice, aec.maxOutput(m16))),
          },
          queue: a.carve('duplex.queue', 'playback.payload', Float32Array, lookahead + 4 * frameSamples + device.period),
        };
      });
      this.#arena = arenas[0]!;
      this.aec = value.aec;
      this.vad = value.vad;
      this.#turns = value.turns;
      this.endpointer = value.turns.endpointer;
      this.#micIn = value.micIn;
      this.#farIn = value.farIn;
      this.#mel = value.mel;
      this.#buf = value.buf;
      this.#queue = value.queue;
      this.#frameSamples = frameSamples;
      this.#lookahead = lookahead;
    } catch (error) {
      for (const h of holds) {
        native.apmDestroy(h.value.handle);
        h.release();
      }
      throw error;
    }
    // Readiness: nothing more is carved for this session.
    this.#arena.seal();
    domain.ledger.seal(owner);
    this.#fader = new Fader(fadeMs, device.rate);
    this.#sink = {
      text: (token) => this.#events.text?.(token),
      pcm: (samples, count) => this.#enqueue(samples, 0, count),
    };
  }

  /** Reply frames barge-in may need to truncate back to (the conversation's `checkpoints`). */
  static checkpointsFor(model: { config: ModelConfig }, lookaheadMs = defaultOf('lookaheadMs') as number): number {
    return checkpointsFor(model.config, lookaheadMs);
  }

  get speaking(): boolean {
    return this.#qCount > 0 || this.#replying || this.#say !== null;
  }

  #say: Float32Array | null = null;
  #sayAt = 0;
  #saying = false;

  /**
   * Plays `pcm` (device rate) in the assistant's voice without the model: a prompt, a chime, a
   * recording. Barge-in stops it like a reply (the conversation is untouched). The array is
   * read as it plays, not copied: keep it unchanged until `speaking` is false.
   */
  say(pcm: Float32Array): void {
    if (this.speaking) throw new ArgumentError('say: the assistant is speaking; wait until speaking is false');
    this.#say = pcm;
    this.#sayAt = 0;
    this.#saying = true;
    this.#replyDone = false;
  }

  /** Appends `samples[at, at + count)` to the playback queue (the caller checked the room). */
  #enqueue(samples: Float32Array, at: number, count: number): void {
    const q = this.#queue;
    for (let i = 0; i < count; i++) q[(this.#qHead + this.#qCount + i) % q.length] = samples[at + i]!;
    this.#qCount += count;
  }

  /** One device period: play, capture, cancel, detect, listen, and generate ahead of playback. */
  tick(): void {
    const b = this.#buf;
    const dev = this.device;
    const clock = dev.clock;
    this.#fill(b.played, clock);
    dev.tick(b.played, b.mic, b.far);
    let peak = 0;
    for (let i = 0; i < b.mic.length; i++) peak = Math.max(peak, Math.abs(b.mic[i]!));
    this.inputPeak = peak;
    const n16 = this.#micIn.push(b.mic, b.mic16, 0, dev.period);
    this.#farIn.push(b.far, b.far16, 0, dev.period);
    const clean = this.aec.push(b.mic16, 0, b.far16, 0, n16, b.clean, 0);
    const nMels = this.#mel.nMels;
    const rows = this.#mel.push(b.clean, b.rows, clean, this.#mel.rows, this.#mel.rows + b.rows.length / nMels);
    for (let r = 0; r < rows; r++) this.#turns.gate.pushRow(b.rows, r * nMels);
    const frames = this.vad.push(b.clean, 0, clean, b.decisions, 0);
    // Until the canceller has converged, what it leaves of the echo is not the user.
    const trusted = this.aec.converged || !this.aec.farActive;
    for (let f = 0; f < frames; f++) this.#frame(b.decisions[f] === 1 && trusted, clock);
    this.#route();
    this.#generate();
  }

  /** Device-rate samples for this period from the queue, through the pause/stop fade. */
  #fill(out: Float32Array, clock: number): void {
    const q = this.#queue;
    const fader = this.#fader;
    for (let i = 0; i < out.length; i++) {
      fader.step(this.#turns.hold);
      if (this.#qCount > 0 && fader.audible(this.#turns.hold)) {
        if (!this.#replyStarted) {
          this.#replyStarted = true;
          this.#events.replyStart?.(clock + i);
        }
        out[i] = fader.gain * q[this.#qHead]!;
        this.#qHead = (this.#qHead + 1) % q.length;
        this.#qCount--;
        this.played++;
      } else {
        out[i] = 0;
        if (this.#replying && !this.#turns.hold) this.underruns++;
      }
    }
    if (this.#replyStarted && this.#replyDone && this.#qCount === 0) {
      this.#replyStarted = false;
      this.#replyDone = false;
      this.#saying = false;
      this.#events.replyEnd?.(clock + out.length);
    }
  }

  /** One frame's decision through turn-taking: playback holds, barge-in, the gate's boundaries. */
  #frame(voiced: boolean, clock: number): void {
    const held = this.#turns.hold;
    const e = this.#turns.frame(voiced);
    if (e === 0) return;
    this.#events.endpoint?.(clock, e);
    if (e === VAD_SPEECH_MAYBE && this.#turns.hold && !held && this.speaking) this.pauses++;
    if (e === VAD_SPEECH_START) {
      if (this.speaking) this.#bargeIn(clock);
      this.#events.speechStart?.(clock);
    } else if (e === VAD_SPEECH_END) this.#events.speechEnd?.(clock);
  }

  /** What the gate lets through goes to the conversation: the segment's rows, then its end. */
  #route(): void {
    const conv = this.conversation;
    const g = this.#turns.gate;
    for (let k = g.next(); k !== GATE_NONE; k = g.next()) {
      if (k === GATE_ROWS) conv.listenRows(g.ring, g.spanAt * g.width, g.spanRows);
      else if (k === GATE_DISCARD) conv.discardSegment();
      else if (k === GATE_END) {
        conv.endSegment({}, g.turnRows);
        conv.startReply();
        this.turns++;
        this.#replying = true;
        this.#replyDone = false;
        this.played = 0;
      }
    }
  }

  /**
   * The listener spoke over the reply: cut it to what they heard. The first frame always stays
   * (a reply cut before any audio would keep its text alone, which no listener heard either).
   */
  #bargeIn(clock: number): void {
    if (this.#saying) {
      this.#say = null;
      this.#saying = false;
      this.#qCount = 0;
      this.#fader.silence();
      this.#replyStarted = false;
      this.bargeIns++;
      this.#events.bargeIn?.(clock, 0);
      return;
    }
    const conv = this.conversation;
    const d = conv.dialogue;
    while (this.#replying && d.frames === 0 && conv.replyStep(NO_SINK) !== EMIT_DONE);
    const heard = keptFrames(d.frames, Math.ceil(this.played / this.#frameSamples));
    let cut = 0;
    if (d.frames >= 1 && conv.truncateReply(heard)) cut = heard;
    else if (this.#replying) while (conv.replyStep(NO_SINK) !== EMIT_DONE);
    this.#replying = false;
    this.#replyDone = false;
    this.#replyStarted = false;
    this.#qCount = 0;
    this.#fader.silence();
    this.bargeIns++;
    this.#events.bargeIn?.(clock, cut);
  }

  /** Reply positions while the queue is under the look-ahead. */
  #generate(): void {
    const say = this.#say;
    if (say !== null) {
      const n = Math.min(say.length - this.#sayAt, this.#queue.length - this.#qCount);
      this.#enqueue(say, this.#sayAt, n);
      this.#sayAt += n;
      if (this.#sayAt === say.length) {
        this.#say = null;
        this.#replyDone = true;
      }
      return;
    }
    const conv = this.conversation;
    while (this.#replying && this.#qCount < this.#lookahead) {
      if (conv.replyStep(this.#sink) !== EMIT_DONE) continue;
      conv.finishReply(this.#sink);
      this.#replying = false;
      this.#replyDone = true;
      this.replies++;
    }
  }

  /** Frees the engines and gives every byte of the session back to the cap. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.aec.close();
    this.vad.close();
    for (const h of this.#holds) h.release();
    const domain = this.conversation.model.domain;
    domain.releaseSlab(this.#arena.slab);
    // Nothing held: the owner may be set up again (another session of this conversation).
    domain.ledger.unseal(domain.owner('session', this.conversation.index));
  }
}
