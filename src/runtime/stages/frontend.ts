import { InternalError } from '../../errors.js';
import { arenaWorkspace } from '../../dsp/workspace.js';
import { MelFrontend } from '../../dsp/mel.js';
import { capacity, SIZING_ENGINE, StreamStage, type Environment, type RoomConv } from './stage.js';
import type { StageSpec } from '../topology.js';
import { CAPTURE_RECORD_MAX } from './capture.js';
import { melRows, segmentSamples } from '../../model/plan/plans.js';
import { maxPayloadOf, RECORD_OVERHEAD } from '../ring.js';
import {
  REC_DISCARD,
  REC_END_SEGMENT,
  REC_MEL,
  REC_SPEECH_END,
  REC_SPEECH_START,
  BELL_MAIN,
  kOnsets,
  kVoice,
  SPEECH_DROPPED,
  SPEECH_TURN,
  type StageConversation,
  type StageOpen,
} from '../protocol.js';
import type { FrameDecider } from '../../dsp/vad.js';
import { prepareVoice } from '../../io/silero.js';
import { makeVoice, maxDecisions } from '../../dsp/voice.js';
import { Endpointer, framesOf, VAD_SPEECH_DROP, VAD_SPEECH_END, VAD_SPEECH_MAYBE, VAD_SPEECH_NOT, VAD_SPEECH_START } from '../../dsp/vad.js';
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
  ep: Endpointer | null;
  decisions: Uint8Array; // one per 10 ms frame of a record
  preRoll: Float32Array; // [PRE_ROLL_ROWS][nMels] the last rows before speech, a ring
  preAt: number;
  preCount: number;
  sent: number; // rows of the open segment sent
  reason: Int32Array; // [1] a SPEECH_END record's payload
  words: Int32Array; // barge-in words: this stage writes kVoice and kOnsets
}

/** Mel rows kept from before a speech onset (the onset is confirmed after it began). */
const PRE_ROLL_ROWS = 24;

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
      // The longest segment, less the pre-roll and a record's rows, so the rows never overflow it.
      const ep = o.vad
        ? new Endpointer(
            {
              onset: framesOf(so.onsetMs),
              silence: framesOf(so.silenceMs),
              minSpeech: framesOf(so.minSpeechMs),
              maxSegment: Math.max(1, maxRows - PRE_ROLL_ROWS - rowsPer),
            },
            vadWs,
          )
        : null;
      return {
        room: (o.vad ? rowsPer + PRE_ROLL_ROWS : rowsPer) * f.nMels + 6 * RECORD_OVERHEAD + 1,
        rowsPer,
        mel,
        pcm: a!.carve('frontend.pcm', 'workspace.frontend', Float32Array, maxIn),
        rows: a!.carve('frontend.rows', 'workspace.frontend', Float32Array, rowsPer * f.nMels),
        maxRows,
        vad,
        ep,
        decisions: a!.carve('frontend.vad', 'metadata', Uint8Array, voice !== null ? maxDecisions(voice, maxIn) : 0),
        preRoll: a!.carve('frontend.pre_roll', 'workspace.frontend', Float32Array, o.vad ? PRE_ROLL_ROWS * f.nMels : 0),
        preAt: 0,
        preCount: 0,
        sent: 0,
        reason: a!.carve('frontend.reason', 'metadata', Int32Array, 1),
      };
    });
    if (conv.room > capacity(o, 'mel'))
      throw new InternalError(`frontend: the mel ring (${capacity(o, 'mel')} words) cannot hold a record's rows (${conv.room})`);
    const words = o.vad ? this.words(o) : new Int32Array(0);
    this.conversations[o.index] = { index: o.index, input: this.input(o, 'pcm16'), out: this.output(o, 'mel'), words, ...conv };
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
    // VAD mode: the mel runs on; rows go out only inside the user's speech.
    const base = c.mel.rows;
    const rows = c.mel.push(c.pcm, c.rows, n, base, base + c.rowsPer);
    const frames = c.vad.push(c.pcm, 0, n, c.decisions, 0);
    // What the echo canceller left while it converges is the assistant, not the user.
    if (echo) c.decisions.fill(0, 0, frames);
    const ep = c.ep!;
    const was = ep.speaking;
    let started = false;
    let ended = 0;
    const w = c.words;
    for (let k = 0; k < frames; k++) {
      const e = ep.push(c.decisions[k] === 1);
      if (e === VAD_SPEECH_START) started = true;
      else if (e === VAD_SPEECH_END) ended = SPEECH_TURN;
      else if (e === VAD_SPEECH_DROP) ended = SPEECH_DROPPED;
      // The main thread holds playback at the first sign of speech and cuts it at the onset.
      if (e === VAD_SPEECH_MAYBE || e === VAD_SPEECH_START) Atomics.store(w, kVoice, 1);
      else if (e === VAD_SPEECH_NOT || e === VAD_SPEECH_END || e === VAD_SPEECH_DROP) Atomics.store(w, kVoice, 0);
      if (e === VAD_SPEECH_START) Atomics.add(w, kOnsets, 1);
      if (e !== 0) this.env.bells.ring(BELL_MAIN);
    }
    if (started && !was) {
      c.out.write(REC_SPEECH_START, null, 0, 0);
      // The pre-roll, oldest first (in at most two records: it is a ring).
      const first = (c.preAt - c.preCount + PRE_ROLL_ROWS) % PRE_ROLL_ROWS;
      const head = Math.min(c.preCount, PRE_ROLL_ROWS - first);
      if (head > 0) c.out.write(REC_MEL, c.preRoll, first * nMels, head * nMels);
      if (c.preCount > head) c.out.write(REC_MEL, c.preRoll, 0, (c.preCount - head) * nMels);
      c.sent = c.preCount;
      c.preCount = 0;
    }
    if (was || started) {
      const k = Math.min(rows, c.maxRows - c.sent);
      if (k > 0) c.out.write(REC_MEL, c.rows, 0, k * nMels);
      c.sent += k;
    } else {
      for (let r = 0; r < rows; r++) {
        for (let j = 0; j < nMels; j++) c.preRoll[c.preAt * nMels + j] = c.rows[r * nMels + j]!;
        c.preAt = (c.preAt + 1) % PRE_ROLL_ROWS;
        c.preCount = Math.min(PRE_ROLL_ROWS, c.preCount + 1);
      }
    }
    if (ended !== 0) {
      c.out.write(ended === SPEECH_TURN ? REC_END_SEGMENT : REC_DISCARD, null, 0, 0);
      c.reason[0] = ended;
      c.out.write(REC_SPEECH_END, c.reason, 0, 1);
      c.sent = 0;
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
  name: 'frontend',
  reads: ['pcm16'],
  writes: ['mel'],
  capacities: { mel: () => 16384 },
  compute: false,
  pin: 1,
  clocks: ['frontend'],
  categories: ['capture', 'native.audio'],
  module: import.meta.url,
  create: (env) => new FrontendStage(env),
};
