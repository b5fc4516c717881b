import { InternalError } from '../../errors.js';
import { arenaWorkspace } from '../../dsp/workspace.js';
import { MelFrontend } from '../../dsp/mel.js';
import { capacity, SIZING_ENGINE, StreamStage, type Environment, type RoomConv } from './stage.js';
import { AUDIO_CATEGORIES, stageDefaults, type StageSpec } from '../topology.js';
import { CAPTURE_RECORD_MAX } from './capture.js';
import { melRows, segmentSamples } from '../../model/plan/plans.js';
import { maxPayloadOf, RECORD_OVERHEAD } from '../ring.js';
import {
  REC_DISCARD,
  REC_END_SEGMENT,
  REC_MEL,
  REC_PROVISIONAL,
  REC_RESUME,
  REC_SPEECH_END,
  REC_SPEECH_START,
  BELL_MAIN,
  kMinSpeechSet,
  kSilenceSet,
  kVadSet,
  kOnsets,
  kVoice,
  SPEECH_DROPPED,
  SPEECH_TURN,
  type StageConversation,
  type StageOpen,
} from '../protocol.js';
import type { FrameDecider } from '../../dsp/voice.js';
import { VAD_LIKELIHOOD, VoiceDetector, type VadLikelihood } from '../../dsp/aec.js';
import { OPTIONS } from '../../options.js';
import { prepareVoice } from '../../io/silero.js';
import { makeVoice, maxDecisions } from '../../dsp/voice.js';
import { framesOf, VAD_SPEECH_START } from '../../duplex/turn.js';
import { TurnTaking } from '../../duplex/turns.js';
import { GATE_END, GATE_NONE, GATE_PROVISIONAL, GATE_RESUME, GATE_ROWS, GATE_START, type SegmentGate } from '../../duplex/gate.js';
import { native } from '../../native.js';

import '../../core/categories.js';

interface FrontendConv extends RoomConv {
  mel: MelFrontend;
  pcm: Float32Array; // one 16 kHz record
  rows: Float32Array; // the rows one record completes
  maxRows: number; // rows of the longest segment
  rowsPer: number; // rows `rows` holds
  /** VAD mode: the turns are found here (null: the host ends them). */
  vad: FrameDecider | null;
  decisions: Uint8Array; // one per 10 ms frame of a record
  /** VAD mode: the turn detector, the segment gate and the playback hold (published as kVoice). */
  turns: TurnTaking | null;
  reason: Int32Array; // [1] a SPEECH_END record's payload
  words: Int32Array; // barge-in words: this stage writes kVoice and kOnsets, reads the settings
  /** The settings words as last applied (kSilenceSet, kMinSpeechSet, kVadSet). */
  silenceSet: number;
  minSpeechSet: number;
  vadSet: number;
}

export class FrontendStage extends StreamStage<FrontendConv> {
  constructor(env: Environment) {
    super('frontend', env);
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const f = c.frontend;
    const so = this.env.init.options;
    // In VAD mode records come from the capture stage (at most CAPTURE_RECORD_MAX samples).
    const maxIn = o.vad ? Math.min(CAPTURE_RECORD_MAX, maxPayloadOf(capacity(o, 'pcm16'))) : maxPayloadOf(capacity(o, 'pcm16'));
    const rowsPer = Math.min(Math.floor(maxPayloadOf(capacity(o, 'mel')) / f.nMels), Math.ceil(maxIn / f.hop) + 4);
    const maxRows = melRows(c, segmentSamples(c, so.segmentSeconds));
    const voice = o.vad ? prepareVoice(so.vad) : null;
    const engine = voice?.kind === 'webrtc' ? this.holdNative(o.index, voice.bound, voice.engine, (e) => native.apmDestroy(e.handle)) : null;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} frontend` }], 1 << 24, ([a]) => {
      this.clocksFor(o.index, a!);
      const ws = arenaWorkspace(a!, 'workspace.frontend', 'frontend');
      const mel = new MelFrontend({ sampleRate: f.sampleRate, nFft: f.nFft, winLength: f.winLength, hop: f.hop, nMels: f.nMels }, ws);
      const vadWs = arenaWorkspace(a!, 'capture', 'frontend');
      const vad = voice !== null ? makeVoice(voice, vadWs, engine ?? SIZING_ENGINE) : null;
      const turns = o.vad
        ? new TurnTaking(
            {
              onsetMs: so.onsetMs,
              silenceMs: so.silenceMs,
              speculateMs: so.speculateMs,
              minSpeechMs: so.minSpeechMs,
              hangover: vad?.hangover ?? 0,
              // `update({ silenceMs })` may ask for up to the option's longest.
              maxSilenceMs: OPTIONS.silenceMs.max,
              width: f.nMels,
              maxRows,
              rowsPerPush: rowsPer,
            },
            vadWs,
            vadWs,
          )
        : null;
      return {
        // A record may release every row the gate holds besides its own, and seven control records (four with a word each).
        room: (rowsPer + (turns?.gate.capacity ?? 0)) * f.nMels + 14 * RECORD_OVERHEAD + 4,
        rowsPer,
        mel,
        pcm: a!.carve('frontend.pcm', 'workspace.frontend', Float32Array, maxIn),
        rows: a!.carve('frontend.rows', 'workspace.frontend', Float32Array, rowsPer * f.nMels),
        maxRows,
        vad,
        decisions: a!.carve('frontend.vad', 'metadata', Uint8Array, voice !== null ? maxDecisions(voice, maxIn) : 0),
        turns,
        reason: a!.carve('frontend.reason', 'metadata', Int32Array, 1),
      };
    });
    if (conv.room > capacity(o, 'mel'))
      throw new InternalError(`frontend: the mel ring (${capacity(o, 'mel')} words) cannot hold a record's rows (${conv.room})`);
    const words = o.vad ? this.words(o) : new Int32Array(0);
    const settings = { silenceSet: 0, minSpeechSet: 0, vadSet: 0 };
    this.conversations[o.index] = { index: o.index, input: this.input(o, 'pcm16'), out: this.output(o, 'mel'), words, ...settings, ...conv };
  }

  protected pcm(c: FrontendConv, echo: boolean): void {
    const n = c.input.read(c.pcm, 0);
    const nMels = this.config.frontend.nMels;
    if (c.vad === null) {
      const base = c.mel.rows;
      const rows = c.mel.push(c.pcm, c.rows, n, base, Math.min(c.maxRows, base + c.rowsPer));
      if (rows > 0) c.out.write(REC_MEL, c.rows, 0, rows * nMels);
      return;
    }
    // VAD mode: the mel runs on; the gate lets the rows of the user's segments through.
    const turns = c.turns!;
    this.#settings(c, turns);
    const gate = turns.gate;
    const base = c.mel.rows;
    const rows = c.mel.push(c.pcm, c.rows, n, base, base + c.rowsPer);
    for (let r = 0; r < rows; r++) gate.pushRow(c.rows, r * nMels);
    const frames = c.vad.push(c.pcm, 0, n, c.decisions, 0);
    // What the echo canceller left while it converges is the assistant, not the user.
    if (echo) c.decisions.fill(0, 0, frames);
    const w = c.words;
    for (let k = 0; k < frames; k++) {
      const held = turns.hold;
      const e = turns.frame(c.decisions[k] === 1);
      if (e === 0) continue;
      // The main thread holds playback at the first sign of speech and cuts it at the onset.
      if (turns.hold !== held) Atomics.store(w, kVoice, turns.hold ? 1 : 0);
      if (e === VAD_SPEECH_START) Atomics.add(w, kOnsets, 1);
      this.env.bells.ring(BELL_MAIN);
    }
    this.#route(c, gate);
  }

  /** The main thread's `update()`: applied between records, so each record is decided by one rule. */
  #settings(c: FrontendConv, turns: TurnTaking): void {
    const w = c.words;
    const silence = Atomics.load(w, kSilenceSet);
    const minSpeech = Atomics.load(w, kMinSpeechSet);
    if (silence !== c.silenceSet || minSpeech !== c.minSpeechSet) {
      const so = this.env.init.options;
      c.silenceSet = silence;
      c.minSpeechSet = minSpeech;
      turns.endpointer.configure(silence > 0 ? silence : framesOf(so.silenceMs), minSpeech > 0 ? minSpeech : framesOf(so.minSpeechMs));
    }
    const vad = Atomics.load(w, kVadSet);
    if (vad !== c.vadSet && c.vad instanceof VoiceDetector) {
      c.vadSet = vad;
      c.vad.setLevel(vad > 0 ? vad : VAD_LIKELIHOOD[this.env.init.options.vad as VadLikelihood]);
      turns.endpointer.hangover = c.vad.hangover;
    }
  }

  /** What the gate lets through, as records: the speech's start, its rows, its end. */
  #route(c: FrontendConv, gate: SegmentGate): void {
    const nMels = this.config.frontend.nMels;
    for (let g = gate.next(); g !== GATE_NONE; g = gate.next()) {
      if (g === GATE_START) c.out.write(REC_SPEECH_START, null, 0, 0);
      else if (g === GATE_ROWS) c.out.write(REC_MEL, gate.ring, gate.spanAt * nMels, gate.spanRows * nMels);
      else if (g === GATE_PROVISIONAL) {
        c.reason[0] = gate.turnRows;
        c.out.write(REC_PROVISIONAL, c.reason, 0, 1);
      } else if (g === GATE_RESUME) c.out.write(REC_RESUME, null, 0, 0);
      else {
        // The decision first: it travels on ahead of the rows a turn told ahead still sends.
        c.reason[0] = g === GATE_END ? SPEECH_TURN : SPEECH_DROPPED;
        c.out.write(REC_SPEECH_END, c.reason, 0, 1);
        // A turn's end carries its rows: the gate may have handed out rows past it.
        c.reason[0] = gate.turnRows;
        if (g === GATE_END) c.out.write(REC_END_SEGMENT, c.reason, 0, 1);
        else c.out.write(REC_DISCARD, null, 0, 0);
      }
    }
  }

  /** In VAD mode the turns are found here: a host's end of segment is not forwarded. */
  protected endSegment(c: FrontendConv): boolean {
    if (c.vad !== null) return false;
    const base = c.mel.rows;
    const rows = c.mel.finish(c.rows, base, Math.min(c.maxRows, base + c.rowsPer));
    if (rows > 0) c.out.write(REC_MEL, c.rows, 0, rows * this.config.frontend.nMels);
    c.mel.reset();
    return true;
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'frontend', (env) => new FrontendStage(env)),
  ...{ reads: ['pcm16'], writes: ['mel'], capacities: { mel: () => 16384 }, pin: 1, clocks: ['frontend'], categories: AUDIO_CATEGORIES },
};
