/**
 * `voxslab serve`: the daemon. Loads the model once, serves conversations over HTTP and
 * WebSocket until SIGINT or SIGTERM, then ends them, returns every byte and exits 0; a second
 * signal exits at once.
 */
import { load } from '../api/engine.js';
import { checkBind, Daemon } from '../daemon/server.js';
import { flagValue, parseFlag } from '../options.js';
import { parsePin, parseStageThreads } from './run.js';
import { findDevice, listDevices, openDuplexDevice, type AudioDevice } from '../io/devices.js';
import { native } from '../native.js';

export interface ServeRequest {
  model: string;
  host?: string | undefined;
  port?: string | undefined;
  token?: string | undefined;
  memory?: string | undefined;
  maxConversations?: string | undefined;
  capacity?: string | undefined;
  maxConnections?: string | undefined;
  maxMessage?: string | undefined;
  maxRequest?: string | undefined;
  stall?: string | undefined;
  rate?: string | undefined;
  segment?: string | undefined;
  reply?: string | undefined;
  context?: string | undefined;
  threads?: string | undefined;
  kv?: string | undefined;
  slots?: string | undefined;
  pin?: string | undefined;
  stageThreads?: string | undefined;
  silence?: string | undefined;
  speculate?: string | undefined;
  onset?: string | undefined;
  minSpeech?: string | undefined;
  vad?: string | undefined;
  lookahead?: string | undefined;
  inputDevice?: string | undefined;
  outputDevice?: string | undefined;
}

export async function serveCommand(r: ServeRequest, log: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Promise<void> {
  const host = r.host ?? '127.0.0.1';
  const token = r.token ?? process.env.VOXSLAB_TOKEN;
  checkBind(host, token);
  const daemonOptions = {
    host,
    port: flagValue<number>('port', r.port),
    maxConversations: flagValue<number>('maxConversations', r.maxConversations),
    maxConnections: flagValue<number>('maxConnections', r.maxConnections),
    maxMessageBytes: flagValue<number>('maxMessageBytes', r.maxMessage),
    maxRequestBytes: flagValue<number>('maxRequestBytes', r.maxRequest),
    stallSeconds: flagValue<number>('stallSeconds', r.stall),
    log,
    ...(token === undefined ? {} : { token }),
  };
  // A process of its own, up for days: socket messages' buffers (64 KiB and more, one per message)
  // are given back to the system when freed rather than kept in malloc's arenas, so what a burst
  // of clients used does not stay resident.
  native.mallocMmapThreshold(32 << 10);
  // Named devices are found before anything is loaded: a missing one is exit 4 at once.
  let devices: { input: AudioDevice; output: AudioDevice } | null = null;
  if (r.inputDevice !== undefined || r.outputDevice !== undefined) {
    const list = listDevices();
    devices = { input: findDevice(r.inputDevice, 'input', list), output: findDevice(r.outputDevice, 'output', list) };
  }
  const options: Parameters<typeof load>[1] = {
    // A device plays the replies: they come at its rate unless --rate says otherwise.
    outputRate: r.rate === undefined && devices !== null ? Math.round(devices.output.defaultRate) : flagValue<number>('outputRate', r.rate),
    segmentSeconds: flagValue<number>('segmentSeconds', r.segment),
    replySeconds: flagValue<number>('replySeconds', r.reply),
    threads: flagValue<number>('threads', r.threads),
    kv: flagValue<'f32' | 'f16'>('kv', r.kv),
    slots: flagValue<number>('slots', r.slots),
    maxConversations: daemonOptions.maxConversations,
    // Endpointing of conversations opened with vad.
    silenceMs: flagValue<number>('silenceMs', r.silence),
    speculateMs: flagValue<number>('speculateMs', r.speculate),
    onsetMs: flagValue<number>('onsetMs', r.onset),
    minSpeechMs: flagValue<number>('minSpeechMs', r.minSpeech),
    vad: flagValue<'silero' | 'very-low' | 'low' | 'moderate' | 'high'>('vad', r.vad),
    lookaheadMs: flagValue<number>('lookaheadMs', r.lookahead),
    log,
  };
  const capacity = parseFlag('capacity', r.capacity) as number | undefined;
  if (capacity !== undefined) options.capacity = capacity;
  const context = parseFlag('context', r.context) as number | undefined;
  if (context !== undefined) options.context = context;
  if (r.memory !== undefined) options.memoryLimit = r.memory;
  const pin = parsePin(r.pin);
  if (pin !== undefined) options.pin = pin;
  const stageThreads = parseStageThreads(r.stageThreads);
  if (stageThreads !== undefined) options.stageThreads = stageThreads;
  const engine = await load(r.model, options);
  let daemon: Daemon;
  try {
    daemon = await Daemon.start(engine, daemonOptions);
  } catch (error) {
    await engine.close();
    throw error;
  }
  const s = engine.snapshot();
  log(`voxslab serve: model '${engine.config.name}', ${s.held.total} bytes held of a ${s.limit}-byte cap; replies at ${engine.outputRate} Hz`);
  const cap = engine.capacity;
  log(
    `compute capacity: ${cap.conversations} conversations at once` +
      (cap.measured
        ? ` (measured: a frame of ${cap.rows.join(', ')} conversations at once takes ${cap.frameMs.map((ms) => ms.toFixed(1)).join(', ')} ms of its ${cap.periodMs})`
        : ' (--capacity)'),
  );
  if (devices === null) log('no audio devices in use: headless, serving WebSocket clients only');
  else {
    let label = `${devices.input.name} → ${devices.output.name} at ${engine.outputRate} Hz`;
    try {
      const device = openDuplexDevice({ input: devices.input, output: devices.output, rate: engine.outputRate });
      label += ` (${device.library})`;
      await daemon.runDevice(device, label);
    } catch (error) {
      await daemon.close();
      throw error;
    }
    log(`devices: ${label}; WebSocket clients too`);
  }
  process.stdout.write(`listening on ${daemon.url}\n`);
  await new Promise<void>((resolve, reject) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) {
        log(`${signal} while stopping: exiting now`);
        process.exit(130);
      }
      stopping = true;
      log(`${signal}: refusing new conversations, ending ${engine.conversations} open, returning every byte`);
      daemon.close().then(() => {
        const after = engine.snapshot();
        log(`stopped: ${after.held.total} bytes held, ${after.reserved} reserved`);
        resolve();
      }, reject);
    };
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGTERM', () => stop('SIGTERM'));
  });
}
