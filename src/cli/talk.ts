/**
 * `voxslab talk`: a live full-duplex conversation on the default or chosen devices (or the
 * loopback device with a WAV file as the user): the transcript on stdout as it is spoken, the
 * input level on stderr, and what happened at the end. `voxslab devices` lists the devices.
 */
import { MemoryDomain } from '../memory/index.js';
import { SpeechModel } from '../core/conversation.js';
import { DuplexSession, type DuplexDevice, type DuplexOptions } from '../core/session.js';
import { LoopbackDevice } from '../io/loopback.js';
import { type DuplexAudioDevice, findDevice, listDevices, openDuplexDevice, runPeriods, type AudioDevice } from '../io/devices.js';
import { readMonoWav } from '../io/files.js';
import { resolveModel } from '../io/checkpoint.js';
import { resampleSignal } from '../dsp/resample.js';
import { flagValue, parseFlag } from '../options.js';
import { ArgumentError } from '../errors.js';
import { type EngineOptions, load } from '../api/engine.js';
import { selfConversation } from './self-talk.js';

export function devicesCommand(json: boolean): string {
  const list = listDevices();
  if (json) return JSON.stringify({ devices: list }, null, 2);
  if (list.length === 0) return 'no audio devices found';
  const lines = ['  id  in  out  rate     host   name'];
  for (const d of list) {
    const mark = `${d.defaultInput ? 'I' : ' '}${d.defaultOutput ? 'O' : ' '}`;
    lines.push(
      `${String(d.id).padStart(4)}${String(d.inputs).padStart(4)}${String(d.outputs).padStart(5)}  ${String(d.defaultRate).padEnd(7)}  ` +
        `${d.hostApi.padEnd(5)}  ${d.name} ${mark.trim() === '' ? '' : `(default ${mark.trim()})`}`,
    );
  }
  return lines.join('\n');
}

export interface TalkRequest {
  model: string;
  inputDevice?: string | undefined;
  outputDevice?: string | undefined;
  loopback?: string | undefined;
  /** Two conversations talk to each other until this many replies (the loopback WAV opens it). */
  self?: string | undefined;
  seconds?: string | undefined;
  /** Longest reply per turn, seconds. */
  reply?: string | undefined;
  rate?: string | undefined;
  seed?: string | undefined;
  silence?: string | undefined;
  onset?: string | undefined;
  minSpeech?: string | undefined;
  vad?: string | undefined;
  lookahead?: string | undefined;
  /** 'pipeline' (the five stages, default) or 'single' (the one-thread reference session). */
  engine?: string | undefined;
}

export interface TalkSummary {
  seconds: number;
  turns: number;
  replies: number;
  bargeIns: number;
  pauses: number;
  underruns: number;
  /** The device library (the addon's PortAudio or naudiodon) and its buffers; input samples its ring dropped; periods the capture ring could not take. */
  device: { library: 'portaudio' | 'naudiodon'; libraryBuffers: number; libraryBytes: number; overruns: number; lostPeriods: number } | null;
  /** The one-thread session's canceller (null: it runs in the pipeline's capture stage). */
  echo: { converged: boolean; gatedFrames: number } | null;
  /** `--self`: the replies, and the SHA-256 of what each side's device played (two runs give the same). */
  self?: { exchanges: number; played: [string, string] };
}

/** Runs a talk session; resolves with its summary when time is up, the WAV is done or `signal` aborts. */
export async function talkCommand(
  r: TalkRequest,
  o: { write: (s: string) => void; log: (s: string) => void; meter: boolean; signal?: AbortSignal },
): Promise<TalkSummary> {
  const dir = resolveModel(r.model, o.log);
  const seconds = flagValue<number>('talkSeconds', r.seconds);
  const seed = flagValue<number>('seed', r.seed);
  const engine = flagValue<string>('engine', r.engine);
  const exchanges = r.self === undefined ? null : flagValue<number>('selfExchanges', r.self);
  if (exchanges !== null && r.loopback === undefined) throw new ArgumentError('talk --self needs --loopback USER.wav: the line that opens the conversation');
  if (exchanges !== null && engine === 'single') throw new ArgumentError('talk --self runs two conversations on the pipeline, not --engine single');
  const reply = parseFlag('replySeconds', r.reply) as number | undefined;
  let devices: { input: AudioDevice; output: AudioDevice } | null = null;
  let rate = parseFlag('deviceRate', r.rate) as number | undefined;
  if (r.loopback === undefined) {
    const list = listDevices();
    devices = { input: findDevice(r.inputDevice, 'input', list), output: findDevice(r.outputDevice, 'output', list) };
    rate ??= Math.round(devices.output.defaultRate);
  } else if (r.inputDevice !== undefined || r.outputDevice !== undefined) {
    throw new ArgumentError('talk: --loopback replaces the devices; give either it or --input-device/--output-device');
  }
  rate ??= 48000;
  const user = r.loopback === undefined ? null : readMonoWav(r.loopback);
  const duplex: TalkDuplex = {};
  const silence = parseFlag('silenceMs', r.silence) as number | undefined;
  const onset = parseFlag('onsetMs', r.onset) as number | undefined;
  const minSpeech = parseFlag('minSpeechMs', r.minSpeech) as number | undefined;
  const vad = parseFlag('vad', r.vad) as DuplexOptions['vad'];
  const lookahead = parseFlag('lookaheadMs', r.lookahead) as number | undefined;
  if (silence !== undefined) duplex.silenceMs = silence;
  if (onset !== undefined) duplex.onsetMs = onset;
  if (minSpeech !== undefined) duplex.minSpeechMs = minSpeech;
  if (vad !== undefined) duplex.vad = vad;
  if (lookahead !== undefined) duplex.lookaheadMs = lookahead;
  if (reply !== undefined) duplex.replySeconds = reply;
  /** The device: PortAudio's, or the loopback device with the WAV as the user. */
  const open = (): { device: DuplexDevice; pa: DuplexAudioDevice | null; userLength: number } => {
    if (devices !== null) {
      const pa = openDuplexDevice({ input: devices.input, output: devices.output, rate: rate! });
      o.log(`talk: ${devices.input.name} → ${devices.output.name} at ${rate} Hz (Ctrl-C ends)`);
      return { device: pa, pa, userLength: Number.POSITIVE_INFINITY };
    }
    const samples = resampleSignal(user!.samples, user!.rate, rate!);
    o.log(`talk: loopback device at ${rate} Hz, the user is ${r.loopback}`);
    return { device: new LoopbackDevice({ rate: rate!, echo: { delayMs: 60, gain: 0.5 }, user: samples }), pa: null, userLength: samples.length };
  };
  const transcript = new Transcript(o.write, rate);
  const args = { dir, seconds, seed, rate, duplex, open, transcript, o };
  if (exchanges !== null) return talkSelf(args, exchanges, resampleSignal(user!.samples, user!.rate, rate));
  return engine === 'single' ? talkSingle(args) : talkPipeline(args);
}

/** The duplex options and the longest reply, as given. */
type TalkDuplex = DuplexOptions & { replySeconds?: number };

interface TalkArgs {
  dir: string;
  seconds: number;
  seed: number;
  rate: number;
  duplex: TalkDuplex;
  open(): { device: DuplexDevice; pa: DuplexAudioDevice | null; userLength: number };
  transcript: Transcript;
  o: { write: (s: string) => void; log: (s: string) => void; meter: boolean; signal?: AbortSignal };
}

/** The transcript as it is spoken, and the input level meter. */
class Transcript {
  readonly #write: (s: string) => void;
  readonly #rate: number;
  readonly #words: number[] = [];
  decode: (ids: number[]) => string = () => '';
  #peak = 0;
  #lastMeter = 0;

  constructor(write: (s: string) => void, rate: number) {
    this.#write = write;
    this.#rate = rate;
  }

  at(clock: number): string {
    return `[${(clock / this.#rate).toFixed(2)} s]`;
  }

  flush(): void {
    if (this.#words.length === 0) return;
    this.#write(this.decode(this.#words));
    this.#words.length = 0;
  }

  speechStart(clock: number): void {
    this.flush();
    this.#write(`\n${this.at(clock)} you: (speaking)`);
  }

  speechEnd(clock: number): void {
    this.#write(` ${this.at(clock)} done\n${this.at(clock)} assistant: `);
  }

  bargeIn(clock: number, heard: number | null): void {
    this.flush();
    this.#write(heard === null ? ` ${this.at(clock)} (interrupted)` : ` ${this.at(clock)} (interrupted: the reply keeps the ${heard} frames you heard)`);
  }

  replyEnd(): void {
    this.flush();
    this.#write('\n');
  }

  text(token: number): void {
    this.#words.push(token);
    if (this.#words.length >= 8) this.flush();
  }

  /** Every tenth of a second of device time, the loudest input since, on stderr (a terminal's). */
  meter(on: boolean, clock: number, peak: number): void {
    this.#peak = Math.max(this.#peak, peak);
    if (!on || clock - this.#lastMeter < this.#rate / 10) return;
    this.#lastMeter = clock;
    const db = this.#peak > 0 ? 20 * Math.log10(this.#peak) : -120;
    const bars = Math.max(0, Math.min(30, Math.round((db + 60) / 2)));
    process.stderr.write(`\r  in ${db.toFixed(0).padStart(4)} dBFS ${'#'.repeat(bars).padEnd(30)}`);
    this.#peak = 0;
  }
}

/**
 * The five-stage pipeline (library API): echo cancellation in the capture stage, VAD in the
 * frontend, barge-in judged by the Depthformer stage, the reply pulled by the device.
 */
async function talkPipeline(a: TalkArgs): Promise<TalkSummary> {
  const { o, transcript: tr, rate } = a;
  const d = a.duplex;
  const engine = await load(a.dir, { outputRate: rate, ...engineDuplex(d) });
  try {
    tr.decode = (ids) => engine.pipeline.tokenizer.decode(ids);
    const { device, pa, userLength } = a.open();
    const conv = await engine.open({ inputRate: rate, seed: a.seed, vad: true, echoDelayMs: Math.min(500, Math.round(device.latencyMs)) });
    let turns = 0;
    let replies = 0;
    let bargeIns = 0;
    let pauses = 0;
    let speaking = false;
    conv.on('speech_start', () => {
      speaking = true;
      tr.speechStart(device.clock);
    });
    conv.on('speech_end', (e) => {
      speaking = false;
      if (e.reason === 'dropped') return;
      turns++;
      tr.speechEnd(device.clock);
    });
    conv.on('barge_in', (e) => {
      bargeIns++;
      tr.bargeIn(device.clock, e.heardFrames);
    });
    conv.on('text', (e) => tr.text(e.token));
    conv.on('turn_end', () => {
      replies++;
      tr.replyEnd();
    });
    let wasPaused = false;
    // On the loopback device: the user's file, then until the last reply has played (at most 30 s more).
    const limit = Math.min(a.seconds * rate, userLength + 30 * rate);
    const link = await conv.run(device, {
      seconds: limit / rate,
      ...(o.signal === undefined ? {} : { signal: o.signal }),
      until: (l) => {
        // A pause is playback held for what may be the user (while a reply is owed).
        if (l.paused && !wasPaused && replies < turns) pauses++;
        wasPaused = l.paused;
        tr.meter(o.meter, l.clock, l.inputPeak);
        return l.clock >= userLength && !speaking && replies >= turns;
      },
    });
    tr.flush();
    if (o.meter) process.stderr.write('\n');
    await conv.close();
    return {
      seconds: Math.round((device.clock / rate) * 100) / 100,
      turns,
      replies,
      bargeIns,
      pauses,
      underruns: link.underruns,
      device:
        pa === null
          ? null
          : { library: pa.library, libraryBuffers: pa.libraryBuffers, libraryBytes: pa.libraryBytes, overruns: pa.overruns, lostPeriods: link.overruns },
      echo: null,
    };
  } finally {
    await engine.close();
  }
}

/** `--self N`: two conversations talk to each other through audio alone (cli/self-talk.ts). */
async function talkSelf(a: TalkArgs, exchanges: number, opener: Float32Array): Promise<TalkSummary> {
  const { o, rate } = a;
  // Lockstep devices wait for the stages: two conversations fit whatever the compute capacity.
  const engine = await load(a.dir, { outputRate: rate, capacity: 2, ...engineDuplex(a.duplex) });
  try {
    o.log(`talk: two conversations on a pair of loopback devices at ${rate} Hz until ${exchanges} replies, the first opened by the user's file`);
    const at = (clock: number): string => `[${(clock / rate).toFixed(2)} s]`;
    const r = await selfConversation(engine, {
      rate,
      opener,
      seed: a.seed,
      exchanges,
      seconds: a.seconds,
      ...(o.signal === undefined ? {} : { signal: o.signal }),
      event: (e) => {
        if (e.kind === 'interrupted') o.write(`${at(e.clock)} ${e.side}: (interrupted)\n`);
        if (e.kind === 'replied') o.write(`${at(e.clock)} ${e.side}: ${engine.pipeline.tokenizer.decode(e.tokens ?? [])} (${e.frames} frames)\n`);
      },
    });
    for (const c of r.conversations) await c.close();
    return {
      seconds: Math.round(r.seconds * 100) / 100,
      turns: r.turns,
      replies: r.replies,
      bargeIns: r.bargeIns,
      pauses: 0,
      underruns: r.underruns,
      device: null,
      echo: null,
      self: { exchanges: r.replies, played: r.sha256 },
    };
  } finally {
    await engine.close();
  }
}

/** The duplex options given, as the engine takes them. */
function engineDuplex(d: TalkDuplex): Pick<EngineOptions, 'silenceMs' | 'onsetMs' | 'minSpeechMs' | 'vad' | 'lookaheadMs' | 'replySeconds'> {
  return {
    ...(d.replySeconds === undefined ? {} : { replySeconds: d.replySeconds }),
    ...(d.silenceMs === undefined ? {} : { silenceMs: d.silenceMs }),
    ...(d.onsetMs === undefined ? {} : { onsetMs: d.onsetMs }),
    ...(d.minSpeechMs === undefined ? {} : { minSpeechMs: d.minSpeechMs }),
    ...(d.vad === undefined ? {} : { vad: d.vad }),
    ...(d.lookaheadMs === undefined ? {} : { lookaheadMs: d.lookaheadMs }),
  };
}

/** The one-thread reference session (DuplexSession): the same behaviour on the calling thread. */
async function talkSingle(a: TalkArgs): Promise<TalkSummary> {
  const { o, transcript: tr, rate } = a;
  const domain = MemoryDomain.create({});
  const model = SpeechModel.load(a.dir, domain, { outputRate: rate, ...(a.duplex.replySeconds === undefined ? {} : { replySeconds: a.duplex.replySeconds }) });
  tr.decode = (ids) => model.tokenizer.decode(ids);
  const conv = model.conversation({ seed: a.seed, inputRate: 16000, checkpoints: DuplexSession.checkpointsFor(model, a.duplex.lookaheadMs) });
  const { device, pa, userLength } = a.open();
  const session = new DuplexSession(conv, device, a.duplex, {
    speechStart: (c) => tr.speechStart(c),
    speechEnd: (c) => tr.speechEnd(c),
    bargeIn: (c, heard) => tr.bargeIn(c, heard),
    replyEnd: () => tr.replyEnd(),
    text: (tk) => tr.text(tk),
  });
  model.ready();
  conv.ready();
  // On the loopback device: the user's file, then at most 30 s for the last reply.
  const limit = Math.min(a.seconds * rate, userLength + 30 * rate);
  try {
    if (pa === null) {
      while (device.clock + device.period <= limit && o.signal?.aborted !== true) {
        session.tick();
        if (device.clock >= userLength && !session.speaking && !session.endpointer.speaking) break;
      }
    } else {
      await runPeriods(
        pa,
        () => {
          session.tick();
          tr.meter(o.meter, device.clock, session.inputPeak);
          return device.clock >= limit;
        },
        o.signal,
      );
    }
  } finally {
    await pa?.stop();
    tr.flush();
    if (o.meter) process.stderr.write('\n');
    session.close();
  }
  return {
    seconds: Math.round((device.clock / rate) * 100) / 100,
    turns: session.turns,
    replies: session.replies,
    bargeIns: session.bargeIns,
    pauses: session.pauses,
    underruns: session.underruns,
    device:
      pa === null ? null : { library: pa.library, libraryBuffers: pa.libraryBuffers, libraryBytes: pa.libraryBytes, overruns: pa.overruns, lostPeriods: 0 },
    echo: { converged: session.aec.converged, gatedFrames: session.aec.gated },
  };
}
