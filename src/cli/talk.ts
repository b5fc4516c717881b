/**
 * `voxslab talk`: a live full-duplex conversation on the default or chosen devices (or the
 * loopback device with a WAV file as the user): the transcript on stdout as it is spoken, the
 * input level on stderr, and what happened at the end. `voxslab devices` lists the devices.
 */
import { MemoryDomain } from '../memory/index.js';
import { SpeechModel } from '../pipeline/conversation.js';
import { DuplexSession, type DuplexDevice, type DuplexOptions } from '../pipeline/session.js';
import { LoopbackDevice } from '../io/loopback.js';
import { findDevice, listDevices, PortAudioDevice, type AudioDevice } from '../io/devices.js';
import { readMonoWav } from '../io/files.js';
import { resolveModel } from '../io/checkpoint.js';
import { resampleSignal } from '../dsp/resample.js';
import { flagValue, parseFlag } from '../options.js';
import { ArgumentError } from '../errors.js';

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
  seconds?: string | undefined;
  rate?: string | undefined;
  seed?: string | undefined;
  silence?: string | undefined;
  onset?: string | undefined;
  minSpeech?: string | undefined;
  vad?: string | undefined;
  lookahead?: string | undefined;
}

export interface TalkSummary {
  seconds: number;
  turns: number;
  replies: number;
  bargeIns: number;
  pauses: number;
  underruns: number;
  device: { libraryBuffers: number; libraryBytes: number; overruns: number } | null;
  echo: { converged: boolean; gatedFrames: number };
}

/** Runs a talk session; resolves with its summary when time is up, the WAV is done or `signal` aborts. */
export async function talkCommand(
  r: TalkRequest,
  o: { write: (s: string) => void; log: (s: string) => void; meter: boolean; signal?: AbortSignal },
): Promise<TalkSummary> {
  const dir = resolveModel(r.model, o.log);
  const seconds = flagValue<number>('talkSeconds', r.seconds);
  const seed = flagValue<number>('seed', r.seed);
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
  const domain = MemoryDomain.create({});
  const model = SpeechModel.load(dir, domain, { outputRate: rate });
  const conv = model.conversation({
    seed,
    inputRate: 16000,
    checkpoints: DuplexSession.checkpointsFor(model, parseFlag('lookaheadMs', r.lookahead) as number | undefined),
  });
  let device: DuplexDevice & { start?: (f: () => void) => void };
  let pa: PortAudioDevice | null = null;
  let userLength = Number.POSITIVE_INFINITY;
  if (devices !== null) {
    pa = new PortAudioDevice({ input: devices.input, output: devices.output, rate });
    device = pa;
    o.log(`talk: ${devices.input.name} → ${devices.output.name} at ${rate} Hz (Ctrl-C ends)`);
  } else {
    const wav = readMonoWav(r.loopback!);
    const user = resampleSignal(wav.samples, wav.rate, rate);
    userLength = user.length;
    device = new LoopbackDevice({ rate, echo: { delayMs: 60, gain: 0.5 }, user });
    o.log(`talk: loopback device at ${rate} Hz, the user is ${r.loopback}`);
  }
  const words: number[] = [];
  const flushText = (): void => {
    if (words.length === 0) return;
    o.write(model.tokenizer.decode(words));
    words.length = 0;
  };
  const at = (clock: number): string => `[${(clock / rate!).toFixed(2)} s]`;
  const duplex: DuplexOptions = {};
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
  const session = new DuplexSession(conv, device, duplex, {
    speechStart: (c) => {
      flushText();
      o.write(`\n${at(c)} you: (speaking)`);
    },
    speechEnd: (c) => o.write(` ${at(c)} done\n${at(c)} assistant: `),
    bargeIn: (c, heard) => {
      flushText();
      o.write(` ${at(c)} (interrupted: the reply keeps the ${heard} frames you heard)`);
    },
    replyEnd: () => {
      flushText();
      o.write('\n');
    },
    text: (tk) => {
      words.push(tk);
      if (words.length >= 8) flushText();
    },
  });
  model.ready();
  conv.ready();
  // On the loopback device: the user's file, then at most 30 s for the last reply.
  const limit = Math.min(seconds * rate, userLength + 30 * rate);
  let peak = 0;
  let lastMeter = 0;
  const meter = (): void => {
    if (!o.meter || device.clock - lastMeter < rate! / 10) return;
    lastMeter = device.clock;
    const db = peak > 0 ? 20 * Math.log10(peak) : -120;
    const bars = Math.max(0, Math.min(30, Math.round((db + 60) / 2)));
    process.stderr.write(`\r  in ${db.toFixed(0).padStart(4)} dBFS ${'#'.repeat(bars).padEnd(30)}`);
    peak = 0;
  };
  try {
    if (pa === null) {
      while (device.clock + device.period <= limit && o.signal?.aborted !== true) {
        session.tick();
        if (device.clock >= userLength && !session.speaking && !session.endpointer.speaking) break;
      }
    } else {
      await new Promise<void>((resolve, reject) => {
        const done = (): void => {
          o.signal?.removeEventListener('abort', done);
          resolve();
        };
        o.signal?.addEventListener('abort', done, { once: true });
        pa!.start(() => {
          if (pa!.failure !== null) return reject(pa!.failure);
          session.tick();
          peak = Math.max(peak, session.inputPeak);
          meter();
          if (device.clock >= limit) done();
        });
      });
    }
  } finally {
    await pa?.stop();
    flushText();
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
    device: pa === null ? null : { libraryBuffers: pa.libraryBuffers, libraryBytes: pa.libraryBytes, overruns: pa.overruns },
    echo: { converged: session.aec.converged, gatedFrames: session.aec.gated },
  };
}
