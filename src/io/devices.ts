/**
 * Real audio devices through PortAudio: the list of inputs and outputs, and a duplex device a
 * `DuplexSession` runs on. Where the addon was built with PortAudio (Debian's libportaudio) the
 * device is `NativeAudioDevice`: PortAudio's callback moves the samples, with no JS and no
 * allocation in the period path. Elsewhere, or with VOXSLAB_AUDIO=naudiodon, it is
 * `PortAudioDevice` on naudiodon: naudiodon hands out a Buffer per input chunk; it is copied
 * into the device's input ring at once, and those Buffers are counted here as the device
 * library's allocations (`library`), apart from voxslab's own. Output goes out through a small
 * pool of Buffers made at open.
 *
 * Stereo devices: the microphone is channel 0; the reply is written to every channel.
 *
 * Thread contract: the main thread (the device's wake-ups and naudiodon's events arrive there).
 * `tick` allocates nothing; naudiodon's stream machinery allocates for each chunk (counted, not
 * avoidable from here).
 */
import { createRequire, Module } from 'node:module';
import { BadInputError, DeviceError } from '../errors.js';
import { native } from '../native.js';
import type { AudioDevice, PortAudioOptions } from './device-types.js';
import { NativeAudioDevice } from './native-device.js';

export type { AudioDevice, PortAudioOptions } from './device-types.js';

interface NaudiodonDevice {
  id: number;
  name: string;
  maxInputChannels: number;
  maxOutputChannels: number;
  defaultSampleRate: number;
  defaultLowInputLatency: number;
  defaultLowOutputLatency: number;
  hostAPIName: string;
}

interface NaudiodonIO {
  on(event: 'data', listener: (chunk: Buffer) => void): this;
  on(event: 'error', listener: (error: Error) => void): this;
  once(event: 'drain', listener: () => void): this;
  write(chunk: Buffer): boolean;
  start(): void;
  quit(cb?: () => void): void;
}

interface Naudiodon {
  getDevices(): NaudiodonDevice[];
  getHostAPIs(): { defaultHostAPI: number; HostAPIs: { id: number; name: string; defaultInput: number; defaultOutput: number }[] };
  SampleFormatFloat32: number;
  AudioIO: new (o: unknown) => NaudiodonIO;
}

let loaded: Naudiodon | null = null;

/** naudiodon, loaded on first use (its native part opens the audio system). */
function naudiodon(): Naudiodon {
  if (loaded !== null) return loaded;
  // alsa-lib prints a screen of messages about sound cards the machine lacks while PortAudio
  // scans; VOXSLAB_ALSA_LOG=1 keeps them.
  if (process.env.VOXSLAB_ALSA_LOG !== '1') native.quietAlsa();
  try {
    loaded = withoutCrashHandler(() => createRequire(import.meta.url)('naudiodon') as Naudiodon);
  } catch (cause) {
    throw new DeviceError('(any)', 'naudiodon (PortAudio) could not be loaded; install it with npm and make sure ALSA (libasound2) is present', { cause });
  }
  return loaded;
}

/**
 * Runs `load` while `require('segfault-handler')` gives a stand-in that registers nothing.
 * naudiodon's entry registers that module's process-wide SIGSEGV handler (it writes crash.log
 * into the working directory); a library must not change the signal handling of the app that
 * embeds it. The module cache is put back as it was, so the app's own require of
 * segfault-handler still gets the real one.
 */
function withoutCrashHandler<T>(load: () => T): T {
  const require = createRequire(import.meta.url);
  let path: string;
  try {
    path = createRequire(require.resolve('naudiodon')).resolve('segfault-handler');
  } catch {
    return load(); // naudiodon without it: nothing to hold off
  }
  const before = require.cache[path];
  const standIn = new Module(path);
  standIn.filename = path;
  standIn.loaded = true;
  standIn.exports = { registerHandler: () => undefined, printStackTrace: () => undefined, causeSegfault: () => undefined };
  require.cache[path] = standIn;
  try {
    return load();
  } finally {
    if (before === undefined) delete require.cache[path];
    else require.cache[path] = before;
  }
}

/** The device library in use: the addon's PortAudio where it has it, unless VOXSLAB_AUDIO says naudiodon. */
export function audioLibrary(): 'portaudio' | 'naudiodon' {
  const v = process.env.VOXSLAB_AUDIO;
  if (v !== undefined && v !== '' && v !== 'portaudio' && v !== 'naudiodon') {
    throw new BadInputError({ field: 'VOXSLAB_AUDIO' }, `must be portaudio or naudiodon, got ${JSON.stringify(v.slice(0, 40))}`);
  }
  if (v === 'naudiodon' || !native.audioAvailable()) {
    if (v === 'portaudio')
      throw new BadInputError({ field: 'VOXSLAB_AUDIO' }, 'this build of the addon has no PortAudio (install portaudio19-dev and rebuild)');
    return 'naudiodon';
  }
  return 'portaudio';
}

/** A duplex device on either library. */
export type DuplexAudioDevice = NativeAudioDevice | PortAudioDevice;

/** A duplex device on the library in use (audioLibrary). */
export function openDuplexDevice(o: PortAudioOptions): DuplexAudioDevice {
  return audioLibrary() === 'portaudio' ? new NativeAudioDevice(o) : new PortAudioDevice(o);
}

/** Every device PortAudio sees. */
export function listDevices(): AudioDevice[] {
  if (audioLibrary() === 'portaudio') {
    if (process.env.VOXSLAB_ALSA_LOG !== '1') native.quietAlsa();
    let list: ReturnType<typeof native.audioDevices>;
    try {
      list = native.audioDevices();
    } catch (cause) {
      throw new DeviceError('(any)', `${(cause as Error).message} (make sure ALSA, libasound2, is present)`, { cause });
    }
    const ms = (s: number): number => Math.round(s * 1000 * 10) / 10;
    return list.map(({ inputLatency, outputLatency, ...d }) => ({ ...d, inputLatencyMs: ms(inputLatency), outputLatencyMs: ms(outputLatency) }));
  }
  const pa = naudiodon();
  const apis = pa.getHostAPIs();
  const api = apis.HostAPIs.find((h) => h.id === apis.defaultHostAPI);
  return pa.getDevices().map((d) => ({
    id: d.id,
    name: d.name,
    hostApi: d.hostAPIName,
    inputs: d.maxInputChannels,
    outputs: d.maxOutputChannels,
    defaultRate: d.defaultSampleRate,
    inputLatencyMs: Math.round(d.defaultLowInputLatency * 1000 * 10) / 10,
    outputLatencyMs: Math.round(d.defaultLowOutputLatency * 1000 * 10) / 10,
    defaultInput: api?.defaultInput === d.id,
    defaultOutput: api?.defaultOutput === d.id,
  }));
}

/**
 * The device `spec` names (an id, or a name or part of one) that can `direction`; the default
 * one when `spec` is undefined. DeviceError when there is none.
 */
export function findDevice(spec: string | undefined, direction: 'input' | 'output', devices = listDevices()): AudioDevice {
  const can = (d: AudioDevice): boolean => (direction === 'input' ? d.inputs : d.outputs) > 0;
  if (spec === undefined) {
    const d = devices.find((x) => (direction === 'input' ? x.defaultInput : x.defaultOutput) && can(x)) ?? devices.find(can);
    if (d === undefined) throw new DeviceError(`default ${direction}`, `no ${direction} device found (voxslab devices lists what PortAudio sees)`);
    return d;
  }
  const byId = /^\d+$/.test(spec) ? devices.find((d) => d.id === Number(spec)) : undefined;
  const d = byId ?? devices.find((x) => x.name === spec) ?? devices.find((x) => x.name.toLowerCase().includes(spec.toLowerCase()) && can(x));
  if (d === undefined) throw new DeviceError(spec, `no such ${direction} device (voxslab devices lists them)`);
  if (!can(d)) throw new DeviceError(spec, `'${d.name}' has no ${direction} channels`);
  return d;
}

/** A device that runs on its own clock and calls back once per period (PortAudioDevice). */
export interface ClockedDevice {
  start(onPeriod: () => void): void;
  readonly failure: Error | null;
}

/**
 * Starts `device` and runs `period` on each of its periods until it returns true or `signal`
 * aborts (resolves), or the device fails (rejects with its error). The caller stops the device.
 */
export function runPeriods(device: ClockedDevice, period: () => boolean, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let over = false;
    const finish = (): void => {
      over = true;
      signal?.removeEventListener('abort', finish);
      resolve();
    };
    if (signal?.aborted === true) return finish();
    signal?.addEventListener('abort', finish, { once: true });
    device.start(() => {
      if (over) return;
      if (device.failure !== null) {
        over = true;
        signal?.removeEventListener('abort', finish);
        reject(device.failure);
      } else if (period()) finish();
    });
  });
}

const OUTPUT_POOL = 8;
const PRIME = 2;

/** A duplex device on PortAudio: lockstep periods for a DuplexSession (session.ts). */
export class PortAudioDevice {
  readonly library = 'naudiodon';
  readonly rate: number;
  readonly period: number;
  readonly latencyMs: number;
  readonly input: AudioDevice;
  readonly output: AudioDevice;
  clock = 0;
  /** The device library's allocations: input Buffers it handed out, and their bytes. */
  libraryBuffers = 0;
  libraryBytes = 0;
  /** Input samples dropped because the ring was full (the session fell behind). */
  overruns = 0;
  /** Periods written while the output still had the previous ones queued (back-pressure). */
  queued = 0;
  /** Times PortAudio was asked to close the streams (once, however the stream ended). */
  closeRequests = 0;
  /** The error that stopped the device, if one did. */
  failure: DeviceError | null = null;
  readonly #io: NaudiodonIO;
  #inChannels = 1;
  #outChannels = 1;
  readonly #ring: Float32Array; // input samples, channel 0
  #head = 0;
  #count = 0;
  readonly #pool: Buffer[];
  readonly #poolViews: Float32Array[];
  #next = 0;
  #onPeriod: (() => void) | null = null;
  #stopped = false;

  constructor(o: PortAudioOptions) {
    const pa = naudiodon();
    this.rate = o.rate;
    this.period = o.period ?? Math.round(o.rate / 100);
    this.input = o.input;
    this.output = o.output;
    this.#ring = new Float32Array(Math.ceil((o.bufferSeconds ?? 2) * o.rate));
    // What the device adds, and the output queue (two periods in naudiodon's queue).
    this.latencyMs = o.input.inputLatencyMs + o.output.outputLatencyMs + (PRIME * 1000 * this.period) / o.rate;
    // Mono where the device takes it; stereo where it insists.
    let io: NaudiodonIO | null = null;
    let failure: unknown = null;
    for (const channels of [1, 2]) {
      if (o.input.inputs < channels || o.output.outputs < channels) continue;
      try {
        io = new pa.AudioIO({
          inOptions: {
            channelCount: channels,
            sampleFormat: pa.SampleFormatFloat32,
            sampleRate: o.rate,
            deviceId: o.input.id,
            closeOnError: false,
            framesPerBuffer: this.period,
            highwaterMark: this.period * channels * 4,
          },
          outOptions: {
            channelCount: channels,
            sampleFormat: pa.SampleFormatFloat32,
            sampleRate: o.rate,
            deviceId: o.output.id,
            closeOnError: false,
            framesPerBuffer: this.period,
            highwaterMark: this.period * channels * 4,
          },
        });
        this.#inChannels = channels;
        this.#outChannels = channels;
        break;
      } catch (cause) {
        failure = cause;
      }
    }
    if (io === null) {
      const why = failure instanceof Error ? failure.message : String(failure ?? 'no channel count both devices have');
      throw new DeviceError(`${o.input.name} / ${o.output.name}`, `could not open at ${o.rate} Hz (busy, or the rate is not supported): ${why}`, {
        cause: failure,
      });
    }
    // naudiodon quits the streams itself when the duplex stream ends (its input finishes, and
    // the stream is not half-open), and stop() quits them too. Two quits can close PortAudio's
    // stream at once, and the second joins a thread the first already joined: a hang. Both
    // share one quit.
    const quit = io.quit.bind(io);
    let quitting: Promise<void> | null = null;
    io.quit = (cb?: () => void): void => {
      if (quitting === null) {
        this.closeRequests++;
        quitting = new Promise((resolve) => quit(() => resolve()));
      }
      void quitting.then(() => cb?.());
    };
    this.#io = io;
    this.#pool = [];
    this.#poolViews = [];
    for (let k = 0; k < OUTPUT_POOL; k++) {
      const b = Buffer.alloc(this.period * this.#outChannels * 4);
      this.#pool.push(b);
      this.#poolViews.push(new Float32Array(b.buffer, b.byteOffset, this.period * this.#outChannels));
    }
    this.#io.on('data', (chunk) => this.#take(chunk));
    this.#io.on('error', (error) => this.#fail(new DeviceError(`${o.input.name} / ${o.output.name}`, `stopped: ${error.message}`, { cause: error })));
  }

  #fail(e: DeviceError): void {
    if (this.failure === null) this.failure = e;
    this.#onPeriod?.();
  }

  /** Copies an input chunk into the ring at once (channel 0), then runs the periods it completes. */
  #take(chunk: Buffer): void {
    this.libraryBuffers++;
    this.libraryBytes += chunk.length;
    const frames = Math.floor(chunk.length / (4 * this.#inChannels));
    const ring = this.#ring;
    for (let i = 0; i < frames; i++) {
      if (this.#count === ring.length) {
        this.overruns++;
        continue;
      }
      ring[(this.#head + this.#count) % ring.length] = chunk.readFloatLE(4 * i * this.#inChannels);
      this.#count++;
    }
    while (this.#count >= this.period && !this.#stopped) this.#onPeriod?.();
  }

  /** Starts the streams; `onPeriod` runs (on this thread) whenever a period of input is in. */
  start(onPeriod: () => void): void {
    this.#onPeriod = onPeriod;
    this.#io.start();
    // Silent periods prime the output: the duplex stream waits for output before input.
    for (let k = 0; k < PRIME; k++) {
      this.#poolViews[this.#next]!.fill(0);
      this.#io.write(this.#pool[this.#next]!);
      this.#next = (this.#next + 1) % OUTPUT_POOL;
    }
  }

  /** Input samples waiting. */
  get available(): number {
    return this.#count;
  }

  /** One period: the next input period into `mic`, `played` out to the device and into `far`. */
  tick(played: Float32Array, mic: Float32Array, far: Float32Array): void {
    const n = this.period;
    const ring = this.#ring;
    for (let i = 0; i < n; i++) {
      mic[i] = this.#count > 0 ? ring[this.#head]! : 0;
      if (this.#count > 0) {
        this.#head = (this.#head + 1) % ring.length;
        this.#count--;
      }
      far[i] = played[i]!;
    }
    const view = this.#poolViews[this.#next]!;
    const ch = this.#outChannels;
    for (let i = 0; i < n; i++) for (let c = 0; c < ch; c++) view[i * ch + c] = played[i]!;
    if (!this.#io.write(this.#pool[this.#next]!)) this.queued++;
    this.#next = (this.#next + 1) % OUTPUT_POOL;
    this.clock += n;
  }

  /** Stops the streams; resolves once PortAudio has closed them. */
  stop(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    this.#stopped = true;
    this.#onPeriod = null;
    return new Promise((resolve) => this.#io.quit(() => resolve()));
  }
}
