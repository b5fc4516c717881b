/**
 * `voxslab bench duplex`: the full-duplex front end on the loopback device (16 kHz, 10 ms
 * periods, simulated device clock): echo return loss enhancement of the WebRTC canceller on
 * assistant speech through the echo path, the user's SNR in double talk, VAD F1 per SNR and
 * noise, end-of-speech decision latency, barge-in detection latency over scripted
 * interruptions at 10 dB SNR over equal-level echo, false barge-ins on echo alone, and the CPU
 * each part takes per second of audio.
 *
 * Barge-in and false barge-ins run the real DuplexSession (src/pipeline/session.ts) with the
 * assistant's speech played through `say`: latency is measured on the device clock from the
 * labelled speech onset to the first period playback ends silent (its pause and fade), counted
 * for interruptions the session then confirms.
 */
import { APM_FRAME, ECHO_GATE_DB, EchoCanceller, VoiceDetector, apmAvailable, type VadLikelihood } from '../src/dsp/aec.js';
import { Endpointer, framesOf, VAD_SPEECH_END } from '../src/duplex/turn.js';
import { LoopbackDevice } from '../src/io/loopback.js';
import type { ClockedDevice } from '../src/io/devices.js';
import { defaultOf } from '../src/options.js';
import { corpusTools, f1, labelFrames, NOISES, noise as makeNoise, rms, scene, utterance, RATE, SENTENCES, SPEEDS, VOICES } from './corpus.js';
import { prng } from '../src/memory/prng.js';
import { setTimeout as delay } from 'node:timers/promises';
import { round } from './util.js';
import { resolveModel } from '../src/io/checkpoint.js';
import { MemoryDomain } from '../src/memory/index.js';
import { SpeechModel } from '../src/core/conversation.js';
import { DuplexSession } from '../src/core/session.js';
import { CLOCKS } from '../src/core/clock.js';
import { resampleSignal } from '../src/dsp/resample.js';
import { EchoPath } from '../src/dsp/echo.js';
import { load, type Engine } from '../src/api/engine.js';
import type { StageStats } from '../src/runtime/protocol.js';
import { production } from './model.js';
import { SileroModel, SileroVad } from '../src/dsp/silero.js';
import type { FrameDecider } from '../src/dsp/voice.js';
import { loadSileroWeights, sileroModelPath } from '../src/io/silero.js';
import type { VadChoice } from '../src/dsp/voice.js';

const PERIOD = RATE / 100;

export interface DuplexBenchResult {
  available: boolean;
  erle: { delayMs: number; erleDb: number }[];
  doubleTalk: { micDb: number; afterDb: number; gatedDb: number };
  vad: { snrDb: number; noise: string; f1: number; precision: number; recall: number }[];
  /** The detector the sessions, the end of speech and the pipeline ran (option `vad`). */
  vadEngine: string;
  /** Silero VAD (the project's arithmetic) on the same scenes as `vad` (WebRTC's), or why it was not run. */
  silero: { vad: DuplexBenchResult['vad']; realtime: number } | { reason: string };
  endOfSpeech: { silenceMs: number; p50Ms: number; p95Ms: number; maxMs: number; turns: number };
  bargeIn: { interruptions: number; detected: number; stoppedEarly: number; missed: number; p50Ms: number; p95Ms: number; maxMs: number };
  bargeInNoisy: DuplexBenchResult['bargeIn'];
  falseBargeIns: { seconds: number; count: number; pauses: number };
  cpu: { loopRealtime: number; vadRealtime: number };
  reply: {
    questions: number;
    turns: number;
    endOfSpeechP50Ms: number;
    computeP50Ms: number;
    firstSampleP50Ms: number;
    firstSampleP95Ms: number;
    realtime: number;
    cpuPercent: Record<string, number>;
  };
  /** The same through the five-stage pipeline (library API, lockstep loopback device). */
  pipeline: {
    /** `replyOver`: scripted interruptions whose reply had already ended (not counted). */
    bargeIn: DuplexBenchResult['bargeIn'] & { userOverEchoDb: number; replyOver: number };
    reply: { questions: number; turns: number; endOfSpeechP50Ms: number; computeP50Ms: number; firstSampleP50Ms: number; firstSampleP95Ms: number };
    /**
     * What a turn's reply costs before its first audio, from the stage clocks: the Conformer's
     * encoding and the Depthformer stage's prefill with the reply's first step, ms per turn
     * encoded (turns encoded ahead included: each is staged once); one text step and one audio
     * step, ms each.
     */
    turnCompute: { encoderMsPerTurn: number; prefillMsPerTurn: number; textStepMs: number; audioStepMs: number };
    /** Busy time of each stage worker per second of device audio, %. */
    cpuPercent: Record<string, number>;
    realtime: number;
    /**
     * Turns offered at a pause and encoded ahead (Conformer), staged with their reply generated
     * ahead (Depthformer), and of those the ones the endpoint kept; `hitRate` = keptAhead / ahead.
     */
    speculation: { encoded: number; encodedKept: number; ahead: number; keptAhead: number; hitRate: number };
    /**
     * Speech onsets the capture and frontend stages took from the assistant's own voice (real
     * speech) heard back at equal level in a quiet room, no user: each would be a false barge-in.
     */
    falseOnsets: { seconds: number; count: number; userHeard: boolean };
  };
}

function assistant(seconds: number, seed: number): Float32Array {
  const r = prng(seed);
  const out = new Float32Array(Math.round(seconds * RATE));
  for (let at = 0; at < out.length; ) {
    const u = utterance(SENTENCES[Math.floor(r() * SENTENCES.length)]!, VOICES[Math.floor(r() * VOICES.length)]!, 170);
    out.set(u.subarray(0, Math.min(u.length, out.length - at)), at);
    at += u.length + Math.round(0.15 * RATE);
  }
  return out;
}

/** RMS of `x` over its voiced frames (`labels`, one per APM_FRAME): a speaker's level. */
function voicedRms(x: Float32Array, labels: Uint8Array): number {
  let e = 0;
  let n = 0;
  for (let f = 0; f < labels.length; f++) if (labels[f] === 1) for (let i = f * APM_FRAME; i < (f + 1) * APM_FRAME; i++, n++) e += x[i]! * x[i]!;
  return Math.sqrt(e / Math.max(1, n));
}

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Scripted interruptions: caught (with their latencies), stopped before the user spoke, missed. */
function bargeInFigures(latencies: number[], early: number, missed: number): DuplexBenchResult['bargeIn'] {
  return {
    interruptions: latencies.length + early + missed,
    detected: latencies.length,
    stoppedEarly: early,
    missed,
    p50Ms: round(pct(latencies, 50), 0),
    p95Ms: round(pct(latencies, 95), 0),
    maxMs: round(Math.max(...latencies), 0),
  };
}

function endpointer(hangover: number): Endpointer {
  const ep = new Endpointer({
    onset: framesOf(defaultOf('onsetMs') as number),
    silence: framesOf(defaultOf('silenceMs') as number),
    minSpeech: framesOf(defaultOf('minSpeechMs') as number),
    maxSegment: 3000,
  });
  ep.hangover = hangover;
  return ep;
}

/**
 * The capture front end alone: `speech` played through the loopback device while `user` talks,
 * echo cancellation period by period; the cleaned microphone at 16 kHz (double talk).
 */
function frontEnd(speech: Float32Array, user: Float32Array, delayMs: number, gateDb: number): Float32Array {
  const dev = new LoopbackDevice({ rate: RATE, echo: { delayMs, gain: 1, seed: 9 }, user });
  const aec = new EchoCanceller({ delayMs: dev.latencyMs, gateDb });
  const mic = new Float32Array(PERIOD);
  const far = new Float32Array(PERIOD);
  const cleaned = new Float32Array(user.length + APM_FRAME);
  let w = 0;
  for (let t = 0; t + PERIOD <= user.length; t += PERIOD) {
    dev.tick(speech.subarray(t, t + PERIOD), mic, far);
    w += aec.push(mic, 0, far, 0, PERIOD, cleaned, w);
  }
  aec.close();
  return cleaned;
}

/** A DuplexSession at 16 kHz on the tiny model, for assistant speech played with `say`. */
function duplexModel(vad: string): {
  model: SpeechModel;
  open(user: Float32Array, delayMs: number, echoGain: number): { session: DuplexSession; device: LoopbackDevice; events: { starts: number[] } };
} {
  const model = SpeechModel.load(
    resolveModel('tiny', () => undefined),
    MemoryDomain.create({}),
    { outputRate: RATE },
  );
  const conv = model.conversation({ seed: 1, inputRate: RATE, checkpoints: DuplexSession.checkpointsFor(model) });
  model.ready();
  conv.ready();
  return {
    model,
    open(user, delayMs, echoGain) {
      const device = new LoopbackDevice({ rate: RATE, echo: { delayMs, gain: echoGain, seed: 9 }, user });
      const events = { starts: [] as number[] };
      const session = new DuplexSession(conv, device, { vad: vad as VadChoice }, { bargeIn: (c) => events.starts.push(c) });
      return { session, device, events };
    },
  };
}

/** `bench duplex --production` (or `--model DIR`): the five-stage figures on a given checkpoint at two endpoint silences. */
export interface DuplexProductionResult {
  available: true;
  production: ({
    checkpoint: string;
    silenceMs: number;
    speculateMs: number;
    /** Last word → first reply sample (p50, p95) and barge-in (p95), ms: `reply` and `bargeIn` below. */
    firstReplyP50Ms: number;
    firstReplyP95Ms: number;
    bargeInP95Ms: number;
    /** The engine's compute capacity as load() measured it. */
    capacity: number;
  } & Omit<DuplexBenchResult['pipeline'], 'falseOnsets'>)[];
}

/** The silences the production figures are taken at: the default and a short one. */
const PRODUCTION_SILENCES = [600, 300];

async function productionRuns(
  models: [string, string][],
  quick: boolean,
  vad: string,
  speculateMs: number,
  log: (line: string) => void,
): Promise<DuplexProductionResult['production']> {
  const rows: DuplexProductionResult['production'] = [];
  for (const [name, dir] of models) {
    for (const silenceMs of PRODUCTION_SILENCES) {
      log(`duplex --production: ${name} at silenceMs ${silenceMs}`);
      const engine = await load(dir, { outputRate: RATE, replySeconds: 12, vad: vad as VadChoice, silenceMs, speculateMs });
      try {
        const r = await pipelineRuns(engine, quick ? 3 : 12, true);
        rows.push({
          checkpoint: name,
          silenceMs,
          speculateMs,
          firstReplyP50Ms: r.reply.firstSampleP50Ms,
          firstReplyP95Ms: r.reply.firstSampleP95Ms,
          bargeInP95Ms: r.bargeIn.p95Ms,
          capacity: engine.capacity.conversations,
          ...r,
        });
      } finally {
        await engine.close();
      }
    }
  }
  return rows;
}

export async function run(
  options: { quick?: boolean; vad?: string; production?: boolean; models?: string[]; speculateMs?: number } = {},
): Promise<DuplexBenchResult | DuplexProductionResult | { available: false; reason: string }> {
  if (!apmAvailable()) return { available: false, reason: 'the native addon was built without WebRTC audio processing' };
  if (!corpusTools()) return { available: false, reason: 'espeak-ng and sox are needed to make the speech set' };
  const quick = options.quick === true;
  if (options.production === true || (options.models?.length ?? 0) > 0) {
    const log = (line: string): void => void process.stderr.write(`${line}\n`);
    const models: [string, string][] = (options.models ?? []).map((m) => [m, resolveModel(m, log)]);
    if (options.production === true) models.push(['lfm2-audio-1.5b q4', await production('q4', log)]);
    const speculateMs = options.speculateMs ?? (defaultOf('speculateMs') as number);
    return { available: true, production: await productionRuns(models, quick, options.vad ?? (defaultOf('vad') as string), speculateMs, log) };
  }
  const vadEngine = options.vad ?? (defaultOf('vad') as string);
  const sileroWeights = sileroModelPath() === null ? null : loadSileroWeights();
  const sileroModel = sileroWeights === null ? null : new SileroModel(sileroWeights);
  const detector = (): FrameDecider => (vadEngine === 'silero' ? new SileroVad(sileroModel as SileroModel) : new VoiceDetector(vadEngine as VadLikelihood));

  // ERLE: assistant speech alone through the echo path.
  const speech = assistant(quick ? 12 : 20, 1);
  const erle: DuplexBenchResult['erle'] = [];
  for (const delayMs of [10, 60, 120, 200]) {
    const dev = new LoopbackDevice({ rate: RATE, echo: { delayMs, gain: 1, seed: 9 } });
    // The engine alone: without the residual echo gate, which would make this figure infinite.
    const aec = new EchoCanceller({ delayMs: dev.latencyMs, gateDb: 0 });
    const mic = new Float32Array(speech.length);
    const far = new Float32Array(speech.length);
    for (let t = 0; t + PERIOD <= speech.length; t += PERIOD) dev.tick(speech.subarray(t, t + PERIOD), mic.subarray(t), far.subarray(t));
    const out = new Float32Array(speech.length + APM_FRAME);
    const n = aec.push(mic, 0, far, 0, speech.length, out, 0);
    const from = 4 * RATE;
    erle.push({ delayMs, erleDb: round(20 * Math.log10(rms(mic, from, n) / Math.max(1e-12, rms(out, from, n))), 1) });
    aec.close();
  }

  // Double talk: the user over equal-level echo.
  const dt = scene({ seed: 3, utterances: 3, snrDb: Infinity, noise: 'white', gap: [2.5, 3] });
  const dtLen = Math.min(dt.speech.length, speech.length);
  const echoMic = new Float32Array(dtLen);
  const dev = new LoopbackDevice({ rate: RATE, echo: { delayMs: 60, gain: 1, seed: 9 } });
  const farTmp = new Float32Array(PERIOD);
  for (let t = 0; t + PERIOD <= dtLen; t += PERIOD) dev.tick(speech.subarray(t, t + PERIOD), echoMic.subarray(t), farTmp);
  /** The user's segment SNR after cancellation, against what the engine makes of the user alone. */
  const userSnr = (gateDb: number): { micDb: number; afterDb: number } => {
    const withUser = { cleaned: frontEnd(speech.subarray(0, dtLen), dt.speech.subarray(0, dtLen), 60, gateDb) };
    const alone = { cleaned: frontEnd(new Float32Array(dtLen), dt.speech.subarray(0, dtLen), 60, gateDb) };
    let uu = 0;
    let ee = 0;
    let dot = 0;
    let aa = 0;
    let oo = 0;
    for (let f = 300; f < Math.floor(dtLen / APM_FRAME); f++) {
      if (dt.labels[f] !== 1) continue;
      for (let i = f * APM_FRAME; i < (f + 1) * APM_FRAME; i++) {
        uu += dt.speech[i]! ** 2;
        ee += echoMic[i]! ** 2;
        dot += withUser.cleaned[i]! * alone.cleaned[i]!;
        aa += alone.cleaned[i]! ** 2;
        oo += withUser.cleaned[i]! ** 2;
      }
    }
    const g = dot / Math.max(1e-12, aa);
    return { micDb: round(10 * Math.log10(uu / ee), 1), afterDb: round(10 * Math.log10((g * g * aa) / Math.max(1e-12, oo - 2 * g * dot + g * g * aa)), 1) };
  };
  const engineOnly = userSnr(0);
  const doubleTalk = { micDb: engineOnly.micDb, afterDb: engineOnly.afterDb, gatedDb: userSnr(ECHO_GATE_DB).afterDb };

  // VAD F1 per SNR and noise, WebRTC's and Silero's (the project's arithmetic).
  const vad: DuplexBenchResult['vad'] = [];
  const sileroVad: DuplexBenchResult['vad'] = [];
  let sileroMs = 0;
  let vadSeconds = 0;
  let vadMs = 0;
  for (const snrDb of [20, 10, 5]) {
    for (const kind of NOISES) {
      const s = scene({ seed: 11, utterances: quick ? 6 : 12, snrDb, noise: kind });
      if (sileroModel !== null) {
        const sv = new SileroVad(sileroModel);
        const d = new Uint8Array(s.labels.length + 8);
        const t0 = performance.now();
        sv.push(s.signal, 0, s.signal.length, d, 0);
        sileroMs += performance.now() - t0;
        const r = f1(d.subarray(0, s.labels.length), s.labels);
        sileroVad.push({ snrDb, noise: kind, f1: round(r.f1, 3), precision: round(r.precision, 3), recall: round(r.recall, 3) });
      }
      const v = new VoiceDetector();
      const dec = new Uint8Array(s.labels.length);
      const t0 = performance.now();
      v.push(s.signal, 0, s.signal.length, dec, 0);
      vadMs += performance.now() - t0;
      vadSeconds += s.signal.length / RATE;
      v.close();
      const r = f1(dec, s.labels);
      vad.push({ snrDb, noise: kind, f1: round(r.f1, 3), precision: round(r.precision, 3), recall: round(r.recall, 3) });
    }
  }

  // End of speech at 10 dB.
  const lags: number[] = [];
  for (const kind of NOISES) {
    const s = scene({ seed: 21, utterances: quick ? 4 : 10, snrDb: 10, noise: kind, gap: [1.2, 2] });
    const v = detector();
    const dec = new Uint8Array(s.labels.length + 8);
    v.push(s.signal, 0, s.signal.length, dec, 0);
    v.close();
    const ep = endpointer(v.hangover);
    const ends: number[] = [];
    for (let f = 0; f < dec.length; f++) if (ep.push(dec[f] === 1) === VAD_SPEECH_END) ends.push(f);
    for (const [, end] of s.segments) {
      let last = Math.floor(end / APM_FRAME);
      while (last > 0 && s.labels[last] !== 1) last--;
      const at = ends.find((f) => f > last);
      if (at !== undefined) lags.push((at - last) * 10);
    }
  }
  const endOfSpeech = { silenceMs: defaultOf('silenceMs') as number, p50Ms: pct(lags, 50), p95Ms: pct(lags, 95), maxMs: Math.max(...lags), turns: lags.length };

  // Barge-in: scripted interruptions, each its own session: the assistant talks for 6 s (the
  // canceller converges, as it has mid-conversation), then the user starts talking 1.5 to 4 s
  // later, 10 dB above the assistant's echo in the microphone.
  // Beside it, the harder case: the echo at the user's level and pink, white or brown noise 10 dB
  // below the user all along.
  const want = quick ? 20 : 50;
  const interruptions = (noisy: boolean): DuplexBenchResult['bargeIn'] => {
    const latencies: number[] = [];
    let early = 0;
    let missed = 0;
    const rand = prng(noisy ? 405 : 404);
    const beds = NOISES.map((kind) => makeNoise(kind, 8));
    for (let k = 0; k < want; k++) {
      const u = utterance(
        SENTENCES[Math.floor(rand() * SENTENCES.length)]!,
        VOICES[Math.floor(rand() * VOICES.length)]!,
        SPEEDS[Math.floor(rand() * SPEEDS.length)]!,
      );
      const settle = 6 * RATE;
      const start = settle + Math.round(((1.5 + 2.5 * rand()) * RATE) / PERIOD) * PERIOD;
      const user = new Float32Array(start + u.length + RATE);
      user.set(u, start);
      const labels = labelFrames(u);
      let first = 0;
      while (labels[first] !== 1) first++;
      const userRms = voicedRms(u, labels);
      const reply = assistant(user.length / RATE + 1, 500 + k);
      let echoGain = 1;
      if (noisy) {
        const bed = beds[k % 3]!;
        const g = userRms / Math.sqrt(10);
        for (let i = 0; i < user.length; i++) user[i] = user[i]! + g * bed[i % bed.length]!;
        echoGain = (userRms / rms(reply)) ** 2;
      } else {
        echoGain = (userRms / rms(reply)) ** 2 / 10;
      }
      const { session, device, events } = duplex.open(user, 20 + Math.floor(rand() * 9) * 20, echoGain);
      session.say(reply);
      // Per period: 1 when playback ended it silent.
      const silent = new Uint8Array(Math.floor(user.length / PERIOD));
      const t0 = performance.now();
      while (device.clock + PERIOD <= user.length) {
        session.tick();
        silent[device.clock / PERIOD - 1] = device.lastPlayed.every((v) => v === 0) ? 1 : 0;
      }
      loopMs += performance.now() - t0;
      loopSeconds += user.length / RATE;
      session.close();
      const onsetPeriod = (start + first * APM_FRAME) / PERIOD;
      if (events.starts.some((t) => t < onsetPeriod * PERIOD)) {
        // A barge-in confirmed before the user spoke (in the canceller's first seconds too: the
        // reply it cut cannot be interrupted again): a false one, not a reaction.
        early++;
        continue;
      }
      if (!events.starts.some((t) => t >= onsetPeriod * PERIOD && t < start + u.length)) {
        missed++;
        continue;
      }
      // Silent from the first period playback ends at gain 0 (the pause before the confirmation).
      let p = onsetPeriod;
      while (p < silent.length && silent[p] === 0) p++;
      latencies.push(((p + 1 - onsetPeriod) * PERIOD * 1000) / RATE);
    }
    return bargeInFigures(latencies, early, missed);
  };
  let loopMs = 0;
  let loopSeconds = 0;
  const duplex = duplexModel(vadEngine);
  const bargeIn = interruptions(false);
  const bargeInNoisy = interruptions(true);

  // False barge-ins: assistant speech with its echo at equal level and a quiet room (pink noise
  // 30 dB under the speech), no user.
  const seconds = quick ? 60 : 300;
  const echoOnly = assistant(seconds, 77);
  const floor = makeNoise('pink', seconds + 1);
  const quiet = new Float32Array(echoOnly.length);
  const level = rms(echoOnly) / 31.6;
  for (let i = 0; i < quiet.length; i++) quiet[i] = level * floor[i]!;
  const fb = duplex.open(quiet, 80, 1);
  fb.session.say(echoOnly);
  while (fb.device.clock + PERIOD <= echoOnly.length) fb.session.tick();
  const falseBargeIns = { seconds, count: fb.session.bargeIns + fb.session.turns, pauses: fb.session.pauses };
  fb.session.close();

  return {
    available: true,
    erle,
    doubleTalk,
    vadEngine,
    vad,
    silero: sileroModel !== null ? { vad: sileroVad, realtime: round(vadSeconds / (sileroMs / 1000), 1) } : { reason: 'the Silero model is not installed' },
    endOfSpeech,
    bargeIn,
    bargeInNoisy,
    falseBargeIns,
    reply: replyLoop(quick, vadEngine),
    pipeline: await pipelineLoop(quick, vadEngine),
    cpu: { loopRealtime: round(loopSeconds / (loopMs / 1000), 1), vadRealtime: round(vadSeconds / (vadMs / 1000), 1) },
  };
}

/**
 * The whole loop with the model (tiny, one thread): questions spoken on the loopback device at
 * 48 kHz, answered. On the simulated device clock compute takes no time, so the latency from
 * the last word to the first reply sample is the end-of-speech decision (device clock) plus the
 * wall time from that decision to the first reply sample leaving the session, plus the two
 * periods a real device queues.
 */
function replyLoop(quick: boolean, vad: string): DuplexBenchResult['reply'] {
  const rate = 48000;
  const dir = resolveModel('tiny', () => undefined);
  const model = SpeechModel.load(dir, MemoryDomain.create({}), { outputRate: rate, replySeconds: 2 });
  const conv = model.conversation({ seed: 1, inputRate: 16000, checkpoints: DuplexSession.checkpointsFor(model) });
  model.ready();
  conv.ready();
  const questions = quick ? 3 : 8;
  const parts: { at: number; x: Float32Array; last: number }[] = [];
  let at = rate;
  for (let k = 0; k < questions; k++) {
    const u = utterance(SENTENCES[k % SENTENCES.length]!, VOICES[k % VOICES.length]!, 165);
    const labels = labelFrames(u);
    let last = labels.length - 1;
    while (last > 0 && labels[last] !== 1) last--;
    const x = resampleSignal(u, 16000, rate);
    parts.push({ at, x, last: at + ((last + 1) * APM_FRAME * rate) / 16000 });
    at += x.length + 5 * rate;
  }
  const user = new Float32Array(at);
  for (const p of parts) user.set(p.x, p.at);
  const device = new LoopbackDevice({ rate, echo: { delayMs: 60, gain: 0.5, seed: 3 }, user });
  const decisions: number[] = [];
  const compute: number[] = [];
  let endWall = 0;
  let turn = -1;
  const session = new DuplexSession(
    conv,
    device,
    { vad: vad as VadChoice },
    {
      speechEnd: (c) => {
        turn = parts.findIndex((p) => p.last <= c && c < p.last + 2 * rate);
        if (turn >= 0) decisions.push(((c - parts[turn]!.last) * 1000) / rate);
        endWall = performance.now();
      },
      replyStart: () => {
        if (turn >= 0) compute.push(performance.now() - endWall);
        turn = -1;
      },
    },
  );
  const t0 = performance.now();
  while (device.clock + device.period <= user.length) session.tick();
  const wall = performance.now() - t0;
  session.close();
  const seconds = user.length / rate;
  const cpu: Record<string, number> = {};
  CLOCKS.forEach((name, i) => {
    const ms = conv.stageMs[i] as number;
    if (ms > 0) cpu[name] = round((100 * ms) / 1000 / seconds, 2);
  });
  const queue = (2 * device.period * 1000) / rate;
  const total = decisions.map((d, i) => d + (compute[i] ?? 0) + queue);
  return {
    questions,
    turns: session.turns,
    endOfSpeechP50Ms: round(pct(decisions, 50), 0),
    computeP50Ms: round(pct(compute, 50), 1),
    firstSampleP50Ms: round(pct(total, 50), 0),
    firstSampleP95Ms: round(pct(total, 95), 0),
    realtime: round(seconds / (wall / 1000), 1),
    cpuPercent: cpu,
  };
}

/**
 * Through the five-stage pipeline (src/api/engine.ts `run` on the loopback device, in lockstep
 * with the stages): the tiny model answers a question, and the user talks over the reply 4 to
 * 6.5 s into it (after the canceller has had its 3 s of far end), 10 dB over the echo of the
 * reply that would have played over their words (a first pass of the same turn without them).
 * Barge-in latency is device clock from the labelled onset to the first period from which
 * playback stays silent; the first reply sample is the end-of-speech decision (device clock)
 * plus the wall time from the decision to the first reply audio (lockstep keeps compute off
 * the device clock) plus the two periods a real device queues.
 */
async function pipelineLoop(quick: boolean, vad: string): Promise<DuplexBenchResult['pipeline']> {
  const engine = await load(
    resolveModel('tiny', () => undefined),
    { outputRate: RATE, replySeconds: 12, vad: vad as VadChoice },
  );
  try {
    const runs = await pipelineRuns(engine, quick ? 10 : 50);
    return { ...runs, falseOnsets: await pipelineFalseOnsets(engine, quick ? 60 : 300) };
  } finally {
    await engine.close();
  }
}

/**
 * `seconds` of the assistant's voice (real speech, as the session's false barge-in run plays
 * it) through a 60 ms echo path at equal level over pink noise 30 dB down, written as duplex
 * audio through the capture stage's echo canceller and the frontend's VAD; then the user, alone,
 * whose turn marks the end. Every speech onset before the user's is a false one.
 */
async function pipelineFalseOnsets(engine: Engine, seconds: number): Promise<{ seconds: number; count: number; userHeard: boolean }> {
  const far = assistant(seconds, 77);
  const mic = new Float32Array(far.length);
  new EchoPath({ rate: RATE, delayMs: 60, gain: 1, seed: 4 }).push(far, mic, 0, far.length);
  const floor = makeNoise('pink', seconds + 1);
  const level = rms(far) / 31.6;
  for (let i = 0; i < mic.length; i++) mic[i] = mic[i]! + level * floor[i]!;
  const conv = await engine.open({ inputRate: RATE, seed: 3, vad: true, echoDelayMs: 60 });
  let onsets = 0;
  let ends = 0;
  conv.on('speech_start', () => onsets++);
  conv.on('speech_end', (e) => {
    if (e.reason === 'vad') ends++;
  });
  const block = RATE / 5;
  const feed = async (m: Float32Array, f: Float32Array): Promise<void> => {
    for (let at = 0; at < m.length; at += block) {
      // Queued either way; false asks the writer to slow down (more than a second waits).
      if (!conv.writeDuplex(m.subarray(at, at + block), f.subarray(at, at + block))) await delay(100);
    }
  };
  await feed(mic, far);
  // Three quiet seconds, and time for the stages to take them: every onset of the echo is in.
  const room = Float32Array.from({ length: 3 * RATE }, (_, i) => level * floor[i]!);
  await feed(room, new Float32Array(room.length));
  await delay(1500);
  const count = onsets;
  const before = ends;
  // Then the user alone, and the silence that ends their turn: the run counts only if they are heard.
  const user = utterance(SENTENCES[0]!, VOICES[0]!, 170);
  const said = new Float32Array(user.length + 2 * RATE);
  said.set(user);
  await feed(said, new Float32Array(said.length));
  for (let waited = 0; ends === before && waited < 60_000; waited += 100) await delay(100);
  const userHeard = onsets > count && ends > before;
  await conv.close();
  return { seconds, count, userHeard };
}

/** The user's level over the echo of what plays while they speak, dB (the acceptance's "10 dB SNR over the echo"). */
const USER_OVER_ECHO_DB = 10;

/**
 * The loopback device on a wall clock: its periods come at the device's pace (a timer catches up
 * on the periods due), as a real device's do, so compute shows on the device clock.
 */
function paced(device: LoopbackDevice): LoopbackDevice & ClockedDevice & { stop(): Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  return Object.assign(device, {
    failure: null,
    start(onPeriod: () => void): void {
      const t0 = performance.now();
      let periods = 0;
      timer = setInterval(() => {
        const due = Math.floor(((performance.now() - t0) * device.rate) / 1000 / device.period);
        for (; periods < due && timer !== null; periods++) onPeriod();
      }, 2);
    },
    stop(): Promise<void> {
      if (timer !== null) clearInterval(timer);
      timer = null;
      return Promise.resolve();
    },
  });
}

/**
 * One scripted turn through the pipeline on the loopback device (lockstep, so the same inputs
 * give the same bytes; or `atPace`, on a wall clock): what played, the barge-ins and the
 * end-of-speech decision on the device clock, and the wall time from that decision to the first
 * reply audio.
 */
async function scriptedTurn(
  engine: Engine,
  user: Float32Array,
  delayMs: number,
  seed: number,
  atPace = false,
  spent: Clocks = noClocks(),
): Promise<{ played: Float32Array; barges: number[]; decidedAt: number; computeMs: number | null; turns: number }> {
  const loopback = new LoopbackDevice({ rate: RATE, echo: { delayMs, gain: 1, seed: 9 }, user });
  const device = atPace ? paced(loopback) : loopback;
  const played = new Float32Array(user.length + RATE);
  const tick = device.tick.bind(device);
  device.tick = (out, mic, far) => {
    played.set(out.subarray(0, Math.min(out.length, played.length - device.clock)), device.clock);
    tick(out, mic, far);
  };
  const conv = await engine.open({ inputRate: RATE, seed, vad: true, echoDelayMs: delayMs });
  const barges: number[] = [];
  let decidedAt = -1;
  let endWall = 0;
  let computeMs: number | null = null;
  let turns = 0;
  conv.on('speech_end', (e) => {
    if (e.reason === 'vad' && decidedAt < 0) {
      decidedAt = device.clock;
      endWall = performance.now();
    }
  });
  conv.once('audio', () => {
    computeMs = performance.now() - endWall;
  });
  conv.on('barge_in', () => barges.push(device.clock));
  conv.on('turn_end', () => turns++);
  // The conversation's clocks from its first speech on (its system prompt runs before).
  let before: Promise<StageStats[]> | null = null;
  conv.on('speech_start', () => {
    before ??= engine.pipeline.stats();
  });
  await conv.run(device, { seconds: user.length / RATE });
  addClocks(spent, conv.index, await engine.pipeline.stats(), 1);
  if (before !== null) addClocks(spent, conv.index, await before, -1);
  await conv.close();
  if (atPace && decidedAt >= 0) {
    // At the device's pace the first reply sample is on the device clock: what played first after the decision.
    let first = decidedAt;
    while (first < played.length && played[first] === 0) first++;
    computeMs = first < played.length ? ((first - decidedAt) * 1000) / RATE : null;
  }
  return { played, barges, decidedAt, computeMs, turns };
}

/** Wall ms and calls of each clock (CLOCKS' names) over the stages. */
type Clocks = Record<string, { ms: number; count: number }>;

function noClocks(): Clocks {
  return Object.fromEntries(CLOCKS.map((name) => [name, { ms: 0, count: 0 }]));
}

/** Adds conversation `index`'s clocks in `stats` to `into`, `sign` times. */
function addClocks(into: Clocks, index: number, stats: StageStats[], sign: number): void {
  for (const s of stats) {
    for (const [name, c] of Object.entries(s.clocks[index] ?? {})) {
      into[name]!.ms += sign * c.ms;
      into[name]!.count += sign * c.count;
    }
  }
}

async function pipelineRuns(engine: Engine, want: number, atPace = false): Promise<Omit<DuplexBenchResult['pipeline'], 'falseOnsets'>> {
  const rand = prng(606);
  const latencies: number[] = [];
  const decisions: number[] = [];
  const compute: number[] = [];
  const spent = noClocks();
  let early = 0;
  let missed = 0;
  let turns = 0;
  let seconds = 0;
  const stats0 = await engine.pipeline.stats();
  const busy0 = stats0.map((s) => s.busyMs);
  const t0 = performance.now();
  let replyOver = 0;
  let runs = 0;
  for (let k = 0; latencies.length + early + missed < want && k < 4 * want; k++) {
    runs++;
    const pick = (): Float32Array =>
      utterance(SENTENCES[Math.floor(rand() * SENTENCES.length)]!, VOICES[Math.floor(rand() * VOICES.length)]!, SPEEDS[Math.floor(rand() * SPEEDS.length)]!);
    const question = pick();
    const over = pick();
    const qLabels = labelFrames(question);
    let last = qLabels.length - 1;
    while (last > 0 && qLabels[last] !== 1) last--;
    const qAt = RATE;
    const lastWord = qAt + (last + 1) * APM_FRAME;
    // The reply starts about 0.7 s after the last word; the user talks over it 4 to 6.5 s in.
    const start = Math.round((lastWord + (0.7 + 4 + 2.5 * rand()) * RATE) / PERIOD) * PERIOD;
    const user = new Float32Array(start + over.length + 2 * RATE);
    user.set(question, qAt);
    const labels = labelFrames(over);
    let first = 0;
    while (labels[first] !== 1) first++;
    const onset = start + first * APM_FRAME;
    const delayMs = 20 + Math.floor(rand() * 9) * 20;
    // First the turn without the interruption: the reply is the same bytes up to it, and its
    // echo over the user's span sets the user's level (USER_OVER_ECHO_DB over it).
    const quiet = await scriptedTurn(engine, user, delayMs, 1 + k, atPace);
    seconds += user.length / RATE;
    const echo = new Float32Array(quiet.played.length);
    new EchoPath({ rate: RATE, delayMs, gain: 1, seed: 9 }).push(quiet.played, echo, 0, quiet.played.length);
    let before = 0;
    for (let i = onset - RATE / 5; i < onset; i++) before += quiet.played[i]! * quiet.played[i]!;
    const echoRms = rms(echo, start, start + over.length);
    if (before === 0 || echoRms === 0) {
      // A reply already over (the model ended its turn) is not an interruption: try another.
      replyOver++;
      continue;
    }
    // The user's level over their voiced frames, as the sessions' interruptions above measure it.
    const gain = (10 ** (USER_OVER_ECHO_DB / 20) * echoRms) / voicedRms(over, labels);
    for (let i = 0; i < over.length; i++) user[start + i] = gain * over[i]!;
    const r = await scriptedTurn(engine, user, delayMs, 1 + k, atPace, spent);
    seconds += user.length / RATE;
    turns += r.turns;
    if (r.decidedAt >= 0) decisions.push(((r.decidedAt - lastWord) * 1000) / RATE);
    if (r.computeMs !== null) compute.push(r.computeMs);
    if (r.barges.some((c) => c < onset)) {
      early++;
      continue;
    }
    if (!r.barges.some((c) => c >= onset && c < start + over.length)) {
      missed++;
      continue;
    }
    let p = onset;
    for (; p < r.played.length; p += PERIOD) {
      let silent = true;
      for (let j = p; j < Math.min(r.played.length, p + RATE / 10); j++) if (r.played[j] !== 0) silent = false;
      if (silent) break;
    }
    latencies.push(((p - onset) * 1000) / RATE);
  }
  const wall = performance.now() - t0;
  const stats = await engine.pipeline.stats();
  const cpu: Record<string, number> = {};
  stats.forEach((s, i) => {
    cpu[s.stage] = round((100 * (s.busyMs - busy0[i]!)) / 1000 / seconds, 2);
  });
  const queue = (2 * PERIOD * 1000) / RATE;
  const total = decisions.map((d, i) => d + (compute[i] ?? 0) + queue);
  const since = (stage: string, key: 'speculations' | 'speculationsKept'): number => {
    const i = stats.findIndex((s) => s.stage === stage);
    return i < 0 ? 0 : stats[i]![key] - stats0[i]![key];
  };
  const ahead = since('depthformer', 'speculations');
  const keptAhead = since('depthformer', 'speculationsKept');
  return {
    bargeIn: { ...bargeInFigures(latencies, early, missed), replyOver, userOverEchoDb: USER_OVER_ECHO_DB },
    reply: {
      questions: runs,
      turns,
      endOfSpeechP50Ms: round(pct(decisions, 50), 0),
      computeP50Ms: round(pct(compute, 50), 1),
      firstSampleP50Ms: round(pct(total, 50), 0),
      firstSampleP95Ms: round(pct(total, 95), 0),
    },
    turnCompute: {
      encoderMsPerTurn: round(spent.encoder!.ms / Math.max(1, spent.encoder!.count), 1),
      prefillMsPerTurn: round(spent.prefill!.ms / Math.max(1, spent.encoder!.count), 1),
      textStepMs: round(spent.textStep!.ms / Math.max(1, spent.textStep!.count), 2),
      audioStepMs: round(spent.audioStep!.ms / Math.max(1, spent.audioStep!.count), 2),
    },
    cpuPercent: cpu,
    realtime: round(seconds / (wall / 1000), 1),
    speculation: {
      encoded: since('conformer', 'speculations'),
      encodedKept: since('conformer', 'speculationsKept'),
      ahead,
      keptAhead,
      hitRate: ahead === 0 ? 0 : round(keptAhead / ahead, 2),
    },
  };
}

export function format(r: DuplexBenchResult | DuplexProductionResult | { available: false; reason: string }): string {
  if (!r.available) return `duplex bench skipped: ${(r as { reason: string }).reason}`;
  if ('production' in r) {
    const lines = [
      'five-stage pipeline on the loopback device at its own pace (a wall clock; 16 kHz, 10 ms periods; the user 10 dB over the echo; ' +
        'compute is the device time from the decision to the first sample played)',
    ];
    for (const p of r.production) {
      const b = p.bargeIn;
      lines.push(
        `  ${p.checkpoint}, silenceMs ${p.silenceMs} (capacity ${p.capacity}): last word → first reply sample p50 ${p.reply.firstSampleP50Ms} ms, ` +
          `p95 ${p.reply.firstSampleP95Ms} ms (decision p50 ${p.reply.endOfSpeechP50Ms} ms + compute p50 ${p.reply.computeP50Ms} ms + 20 ms device queue; ` +
          `${p.reply.turns} turns; per turn: encoder ${p.turnCompute.encoderMsPerTurn} ms, prefill and first step ${p.turnCompute.prefillMsPerTurn} ms, ` +
          `then ${p.turnCompute.textStepMs} ms a text step, ${p.turnCompute.audioStepMs} ms an audio step); barge-in p50 ${b.p50Ms} ms, p95 ${b.p95Ms} ms, max ${b.maxMs} ms (${b.detected}/${b.interruptions}; ` +
          `${b.stoppedEarly} early, ${b.missed} missed, ${b.replyOver} after the reply ended); speculateMs ${p.speculateMs}: ` +
          `${p.speculation.keptAhead} of ${p.speculation.ahead} replies begun ahead kept (${p.speculation.encoded} turns encoded ahead); ` +
          `${p.realtime}× real time; stage busy % of a core: ` +
          Object.entries(p.cpuPercent)
            .map(([k, v]) => `${k} ${v}`)
            .join(', '),
      );
    }
    return lines.join('\n');
  }
  const x = r as DuplexBenchResult;
  const lines = [`full-duplex front end on the loopback device (16 kHz, 10 ms periods; WebRTC echo cancellation; VAD: ${x.vadEngine})`];
  lines.push(`  ERLE after convergence:   ${x.erle.map((e) => `${e.delayMs} ms ${e.erleDb} dB`).join(', ')}`);
  lines.push(
    `  double talk:              user-to-echo ${x.doubleTalk.micDb} dB in the microphone → ${x.doubleTalk.afterDb} dB after cancellation ` +
      `(${x.doubleTalk.gatedDb} dB with the residual echo gate)`,
  );
  const sil = 'vad' in x.silero ? x.silero.vad : null;
  for (const snr of [20, 10, 5]) {
    const row = (list: DuplexBenchResult['vad']): string =>
      list
        .filter((v) => v.snrDb === snr)
        .map((v) => `${v.noise} ${v.f1}`)
        .join(', ');
    lines.push(`  VAD F1 at ${String(snr).padStart(2)} dB:         WebRTC ${row(x.vad)}${sil === null ? '' : `; Silero ${row(sil)}`}`);
  }
  lines.push(
    'vad' in x.silero
      ? `  Silero VAD (the project's arithmetic, one thread) takes ${round(x.cpu.vadRealtime / x.silero.realtime, 1)}× the time of WebRTC's VAD on the same audio`
      : `  Silero VAD not measured: ${x.silero.reason}`,
  );
  lines.push(
    `  end of speech:            p50 ${x.endOfSpeech.p50Ms} ms, p95 ${x.endOfSpeech.p95Ms} ms, max ${x.endOfSpeech.maxMs} ms after the last word ` +
      `(silence ${x.endOfSpeech.silenceMs} ms; ${x.endOfSpeech.turns} turns)`,
  );
  const bi = (b: DuplexBenchResult['bargeIn']): string =>
    `p50 ${b.p50Ms} ms, p95 ${b.p95Ms} ms, max ${b.maxMs} ms from the speech onset (${b.detected}/${b.interruptions} interruptions; ` +
    `${b.stoppedEarly} stopped before the user spoke, ${b.missed} missed)`;
  lines.push(`  barge-in, user 10 dB over the echo: ${bi(x.bargeIn)}`);
  lines.push(`  barge-in, equal echo + noise at 10 dB: ${bi(x.bargeInNoisy)}`);
  lines.push(
    `  false barge-ins:          ${x.falseBargeIns.count} in ${x.falseBargeIns.seconds} s of assistant speech with equal-level echo ` +
      `(${x.falseBargeIns.pauses} brief pauses that resumed)`,
  );
  const rp = x.reply;
  lines.push(
    `  the loop with the model:  ${rp.turns}/${rp.questions} questions answered on the loopback device (tiny model, one thread, ${rp.realtime}× real time)`,
  );
  lines.push(
    `  last word → first reply sample: p50 ${rp.firstSampleP50Ms} ms, p95 ${rp.firstSampleP95Ms} ms (end-of-speech decision p50 ` +
      `${rp.endOfSpeechP50Ms} ms + compute p50 ${rp.computeP50Ms} ms + 20 ms device queue)`,
  );
  lines.push(
    `  CPU per stage (% of one core): ${Object.entries(rp.cpuPercent)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  const pp = x.pipeline;
  lines.push(
    `  five-stage pipeline, barge-in over the model's reply (user ${pp.bargeIn.userOverEchoDb} dB over its echo): ${bi(pp.bargeIn)}; ` +
      `${pp.bargeIn.replyOver} more scripted ones came after the reply had ended`,
  );
  lines.push(
    `  five-stage pipeline, last word → first reply sample: p50 ${pp.reply.firstSampleP50Ms} ms, p95 ${pp.reply.firstSampleP95Ms} ms ` +
      `(decision p50 ${pp.reply.endOfSpeechP50Ms} ms + compute p50 ${pp.reply.computeP50Ms} ms + 20 ms device queue; per turn: encoder ` +
      `${pp.turnCompute.encoderMsPerTurn} ms, prefill and first step ${pp.turnCompute.prefillMsPerTurn} ms)`,
  );
  lines.push(
    `  five-stage pipeline, false onsets: ${pp.falseOnsets.count} in ${pp.falseOnsets.seconds} s of the assistant's voice (real speech) ` +
      `heard back at equal level, no user (the user after it ${pp.falseOnsets.userHeard ? 'was' : 'was NOT'} heard)`,
  );
  lines.push(
    `  five-stage pipeline, stage busy time (% of one core per second of audio): ${Object.entries(pp.cpuPercent)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  lines.push(
    `  CPU:                      the duplex front end (resampling, echo cancellation, VAD, endpointing, room simulation) ${x.cpu.loopRealtime}× ` +
      `real time, the VAD alone ${x.cpu.vadRealtime}× (one core)`,
  );
  return lines.join('\n');
}
