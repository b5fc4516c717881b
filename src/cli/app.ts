/**
 * The `voxslab` command: parses, calls the library, maps errors to exit codes (0 ok, 1 internal
 * fault, 2 usage, 3 memory limit, 4 bad input). Every flag and its help line come from the
 * options table (src/options.ts). main.ts runs it as a process; the fuzz harness calls `runCli`
 * in worker threads.
 */
import { parseArgs } from 'node:util';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageError } from '../errors.js';
import { reportFailure } from './failure.js';
import { defaultOf, flagOf, flagValue, optionHelp, parseArgsOptions, parseFlag, wrap, type OptionKey } from '../options.js';
import { PLAN_KEYS } from './plan-keys.js';
import type { runCommand as RunCommand } from './run.js';
import type { serveCommand as ServeCommand } from './serve.js';
import { registeredBenches, type Bench } from './benches.js';
import type { FloatDtype } from '../io/checkpoint.js';
import type { GgufType } from '../model/format/gguf.js';

type Values = Record<string, string | string[] | boolean | undefined>;

interface Command {
  usage: string;
  summary: string;
  keys: readonly OptionKey[];
  /** Options that must be given. */
  required?: readonly OptionKey[];
  /** Positional arguments it takes (bench takes the benchmark's name). */
  positionals?: number;
  run(values: Values, positionals: string[]): Promise<void>;
}

const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};
const text = (v: Values, key: OptionKey): string | undefined => v[flagOf(key)] as string | undefined;
/** A repeatable flag where one value is meant: the last one given wins, as for every other flag. */
const last = (v: Values, key: OptionKey): string => (v[flagOf(key)] as string[]).at(-1) as string;

const COMMANDS: Record<string, Command> = {
  plan: {
    usage: 'voxslab plan --config <tiny|small|lfm2-audio-1.5b|FILE|DIR> [options] | --intervals FILE.csv [--align N] [--json]',
    summary: 'memory manifest of a configuration, or a plan of a CSV of buffers (nothing allocated)',
    keys: ['config', ...PLAN_KEYS, 'intervals', 'align', 'json'],
    async run(v) {
      const json = v.json === true;
      if ((v.intervals === undefined) === (v.config === undefined)) throw new UsageError('plan: give either --config <name|file> or --intervals FILE.csv');
      if (v.intervals !== undefined) {
        const { planIntervals } = await import('./plan.js');
        process.stdout.write(`${planIntervals(v.intervals as string, text(v, 'align'), json)}\n`);
        return;
      }
      const values: Partial<Record<(typeof PLAN_KEYS)[number], string>> = {};
      for (const k of PLAN_KEYS) {
        const t = text(v, k);
        if (t !== undefined) values[k] = t;
      }
      const { planConfig } = await import('./plan.js');
      process.stdout.write(`${planConfig({ config: v.config as string, values, json })}\n`);
    },
  },
  'make-checkpoint': {
    usage: 'voxslab make-checkpoint --config <tiny|small|lfm2-audio-1.5b> --seed N --out DIR [--dtype f32|f16|bf16|q8|q4]',
    summary: 'deterministic synthetic checkpoint in the public layout',
    keys: ['config', 'seed', 'output', 'dtype'],
    required: ['config', 'seed', 'output'],
    async run(v) {
      const seed = parseFlag('seed', text(v, 'seed')) as number;
      const dtype = flagValue<string>('dtype', text(v, 'dtype'));
      const config = v.config as string;
      const out = last(v, 'output');
      const group = Number(defaultOf('group'));
      // Refused before any work: an unknown configuration, then an output that exists as a file,
      // a non-empty folder, a name too long.
      const [{ builtinConfig, makeCheckpoint }, { checkFolderWritable, stagedFolder }, { quantizeCheckpoint }] = await Promise.all([
        import('../io/checkpoint.js'),
        import('../io/files.js'),
        import('../io/quantize.js'),
      ]);
      builtinConfig(config);
      checkFolderWritable(out, '--out');
      if (dtype === 'q8' || dtype === 'q4') {
        // Generate in f32, then quantize with the same tool users run on real checkpoints.
        const tmp = mkdtempSync(join(tmpdir(), 'voxslab-make-'));
        try {
          makeCheckpoint({ config, seed, out: tmp, dtype: 'f32' });
          const r = await quantizeCheckpoint({ input: tmp, output: out, bits: dtype === 'q8' ? 8 : 4, group });
          log(`wrote ${out}: ${r.quantized} tensors quantized to ${dtype} (group ${group}), ${r.kept} kept`);
        } finally {
          rmSync(tmp, { recursive: true, force: true });
        }
        return;
      }
      const r = await stagedFolder(out, '--out', (tmp) => makeCheckpoint({ config, seed, out: tmp, dtype: dtype as FloatDtype }));
      log(`wrote ${r.files.length} files, ${r.bytes} bytes, to ${out}`);
    },
  },
  quantize: {
    usage: 'voxslab quantize --in DIR --out DIR --bits 4|8 [--group 32|64]',
    summary: 'affine group quantization of a checkpoint (all cores)',
    keys: ['input', 'output', 'bits', 'group'],
    required: ['input', 'output', 'bits'],
    async run(v) {
      const bits = Number(parseFlag('bits', text(v, 'bits'))) as 4 | 8;
      const group = Number(flagValue<string>('group', text(v, 'group')));
      const [input, output] = [last(v, 'input'), last(v, 'output')];
      const { quantizeCheckpoint } = await import('../io/quantize.js');
      const r = await quantizeCheckpoint({ input, output, bits, group });
      log(`wrote ${output}: ${r.quantized} tensors quantized, ${r.kept} kept (${r.threads} threads)`);
    },
  },
  'export-gguf': {
    usage: 'voxslab export-gguf --model <DIR|tiny|small> --out X.gguf [--type q4_0|q8_0|f16|f32]',
    summary: 'the backbone as a GGUF file llama.cpp loads (architecture lfm2)',
    keys: ['model', 'output', 'ggufType'],
    required: ['model', 'output'],
    async run(v) {
      const type = flagValue<string>('ggufType', text(v, 'ggufType')) as GgufType;
      const out = last(v, 'output');
      const [{ resolveModel }, { exportGguf }] = await Promise.all([import('../io/checkpoint.js'), import('../io/gguf.js')]);
      const model = resolveModel(v.model as string, log);
      const r = exportGguf({ model, out, type, progress: true });
      log(`wrote ${out}: ${r.tensors} tensors, ${r.bytes} bytes (${type})`);
    },
  },
  run: {
    usage: 'voxslab run --model <DIR|tiny|small> --in A.wav --out B.wav [--in C.wav --out D.wav] [options]',
    summary:
      'answer each user segment with speech (float32 WAV) and print the text reply; all inputs at once through the pinned five-stage pipeline ' +
      '(--engine single: one after the other, on one thread)',
    keys: [
      'model',
      'input',
      'output',
      'outputRate',
      'report',
      'dump',
      'seed',
      'context',
      'segmentSeconds',
      'replySeconds',
      'threads',
      'kv',
      'engine',
      'pin',
      'stageThreads',
      'slots',
      'realtime',
    ],
    required: ['model', 'input', 'output'],
    async run(v) {
      const request: Parameters<typeof RunCommand>[0] = {
        model: v.model as string,
        inputs: v.in as string[],
        outputs: v.out as string[],
        realtime: v.realtime === true,
      };
      const fields = {
        rate: 'outputRate',
        report: 'report',
        dump: 'dump',
        seed: 'seed',
        context: 'context',
        segment: 'segmentSeconds',
        reply: 'replySeconds',
        threads: 'threads',
        kv: 'kv',
        engine: 'engine',
        pin: 'pin',
        stageThreads: 'stageThreads',
        slots: 'slots',
      } as const;
      for (const [field, key] of Object.entries(fields)) request[field as keyof typeof fields] = text(v, key);
      const { runCommand } = await import('./run.js');
      process.stdout.write(`${await runCommand(request)}\n`);
    },
  },
  serve: {
    usage:
      'voxslab serve [--model <DIR|tiny|small>] [--host 127.0.0.1] [--port 7860] [--token SECRET] [--memory SIZE] [--input-device ID] ' +
      '[--output-device ID] [options]',
    summary:
      'the voice daemon: HTTP and WebSocket conversations on one loaded model, a live page at /, /healthz, /readyz, /v1/memory, /metrics; SIGINT ' +
      'or SIGTERM ends the conversations, returns every byte and exits 0',
    keys: [
      'model',
      'host',
      'port',
      'token',
      'memoryLimit',
      'maxConversations',
      'capacity',
      'maxConnections',
      'maxMessageBytes',
      'maxRequestBytes',
      'stallSeconds',
      'outputRate',
      'segmentSeconds',
      'replySeconds',
      'context',
      'threads',
      'kv',
      'slots',
      'pin',
      'stageThreads',
      'silenceMs',
      'speculateMs',
      'onsetMs',
      'minSpeechMs',
      'vad',
      'lookaheadMs',
      'inputDevice',
      'outputDevice',
    ],
    async run(v) {
      const request: Parameters<typeof ServeCommand>[0] = { model: (v.model as string | undefined) ?? 'tiny' };
      const fields = {
        host: 'host',
        port: 'port',
        token: 'token',
        memory: 'memoryLimit',
        maxConversations: 'maxConversations',
        capacity: 'capacity',
        maxConnections: 'maxConnections',
        maxMessage: 'maxMessageBytes',
        maxRequest: 'maxRequestBytes',
        stall: 'stallSeconds',
        rate: 'outputRate',
        segment: 'segmentSeconds',
        reply: 'replySeconds',
        context: 'context',
        threads: 'threads',
        kv: 'kv',
        slots: 'slots',
        pin: 'pin',
        stageThreads: 'stageThreads',
        silence: 'silenceMs',
        speculate: 'speculateMs',
        onset: 'onsetMs',
        minSpeech: 'minSpeechMs',
        vad: 'vad',
        lookahead: 'lookaheadMs',
        inputDevice: 'inputDevice',
        outputDevice: 'outputDevice',
      } as const;
      for (const [field, key] of Object.entries(fields)) request[field as keyof typeof fields] = text(v, key);
      const { serveCommand } = await import('./serve.js');
      await serveCommand(request);
    },
  },
  talk: {
    usage: 'voxslab talk [--model <DIR|tiny|small>] [--input-device ID] [--output-device ID] [--rate HZ] [--seconds N] | --loopback USER.wav [--self N]',
    summary:
      'a live full-duplex conversation: the transcript as it is spoken, the input level, barge-in when you talk over the reply (echo cancellation ' +
      'and VAD need the addon built with WebRTC audio processing)',
    keys: [
      'model',
      'inputDevice',
      'outputDevice',
      'loopback',
      'selfExchanges',
      'deviceRate',
      'talkSeconds',
      'replySeconds',
      'seed',
      'silenceMs',
      'onsetMs',
      'minSpeechMs',
      'vad',
      'lookaheadMs',
      'engine',
    ],
    async run(v) {
      const controller = new AbortController();
      const stop = (): void => controller.abort();
      process.once('SIGINT', stop);
      const { talkCommand } = await import('./talk.js');
      try {
        const summary = await talkCommand(
          {
            model: (v.model as string | undefined) ?? 'tiny',
            inputDevice: text(v, 'inputDevice'),
            outputDevice: text(v, 'outputDevice'),
            loopback: text(v, 'loopback'),
            self: text(v, 'selfExchanges'),
            seconds: text(v, 'talkSeconds'),
            reply: text(v, 'replySeconds'),
            rate: text(v, 'deviceRate'),
            seed: text(v, 'seed'),
            silence: text(v, 'silenceMs'),
            onset: text(v, 'onsetMs'),
            minSpeech: text(v, 'minSpeechMs'),
            vad: text(v, 'vad'),
            lookahead: text(v, 'lookaheadMs'),
            engine: text(v, 'engine'),
          },
          { write: (s) => process.stdout.write(s), log, meter: process.stderr.isTTY === true, signal: controller.signal },
        );
        log(
          `talk: ${summary.seconds} s, ${summary.turns} turns, ${summary.replies} replies, ${summary.bargeIns} barge-ins, ${summary.pauses} ` +
            `pauses; ${summary.echo === null ? 'echo cancellation in the capture stage' : `echo canceller ${summary.echo.converged ? 'converged' : 'not converged'}`}` +
            (summary.device === null
              ? ''
              : `; device library (${summary.device.library}): ${summary.device.libraryBuffers} buffers, ${summary.device.libraryBytes} bytes; ${summary.device.overruns} samples overrun, ${summary.device.lostPeriods} periods lost`) +
            (summary.self === undefined ? '' : `; played sha256 A ${summary.self.played[0]}, B ${summary.self.played[1]}`),
        );
      } finally {
        process.off('SIGINT', stop);
      }
    },
  },
  devices: {
    usage: 'voxslab devices [--json]',
    summary: 'the audio inputs and outputs PortAudio sees: ids, channels, default rates',
    keys: ['json'],
    async run(v) {
      const { devicesCommand } = await import('./talk.js');
      process.stdout.write(`${devicesCommand(v.json === true)}\n`);
    },
  },
  resample: {
    usage: 'voxslab resample --in A.wav --rate HZ --out B.wav',
    summary: 'band-limited resampling, every channel kept',
    keys: ['input', 'resampleRate', 'output'],
    required: ['input', 'resampleRate', 'output'],
    async run(v) {
      const { resampleFile } = await import('./audio.js');
      log(resampleFile(last(v, 'input'), text(v, 'resampleRate') as string, last(v, 'output')));
    },
  },
  mel: {
    usage: 'voxslab mel --in A.wav --out M.npy [--raw]',
    summary: 'log-mel features of 16 kHz audio, float32 [frames, 128]',
    keys: ['input', 'output', 'raw'],
    required: ['input', 'output'],
    async run(v) {
      const { melFile } = await import('./audio.js');
      log(melFile(last(v, 'input'), last(v, 'output'), v.raw === true));
    },
  },
  bench: {
    usage:
      'voxslab bench <name> [--json] [--quick]   (bench model, pipeline and duplex take --production; bench model and duplex --model DIR, repeatable; ' +
      'bench model --peer and --peer-bench PATH; bench duplex --vad and --speculate MS)',
    summary: 'benchmarks, measured as ratios against a peer or the machine in the same run',
    keys: ['json', 'quick', 'production', 'benchModels', 'peer', 'peerBench', 'vad', 'speculateMs'],
    positionals: 1,
    async run(v, positionals) {
      const benches = await loadBenches();
      const name = positionals[0];
      const names = [...benches.keys()].join(', ');
      if (name === undefined) throw new UsageError(`bench: name one benchmark (${names})`);
      const b = benches.get(name);
      if (b === undefined) throw new UsageError(`bench: unknown benchmark '${name}' (available: ${names})`);
      if (name !== 'model' && name !== 'duplex' && v.model !== undefined) throw new UsageError('bench: --model is an option of bench model and bench duplex');
      if (name !== 'model' && name !== 'pipeline' && name !== 'duplex' && v.production === true)
        throw new UsageError('bench: --production is an option of bench model, bench pipeline and bench duplex');
      if (name !== 'model' && v.peer === true) throw new UsageError('bench: --peer is an option of bench model');
      if (v['peer-bench'] !== undefined && v.peer !== true) throw new UsageError('bench: --peer-bench needs --peer');
      if (name !== 'duplex' && v.vad !== undefined) throw new UsageError('bench: --vad is an option of bench duplex');
      if (name !== 'duplex' && v.speculate !== undefined) throw new UsageError('bench: --speculate is an option of bench duplex');
      const models = (v.model as string[] | undefined) ?? [];
      const options = {
        quick: v.quick === true,
        production: v.production === true,
        peer: v.peer === true,
        models,
        ...(v['peer-bench'] === undefined ? {} : { peerBench: v['peer-bench'] as string }),
        ...(v.speculate === undefined ? {} : { speculateMs: flagValue<number>('speculateMs', text(v, 'speculateMs')) }),
      };
      const result = await b.run(v.vad === undefined ? options : { ...options, vad: v.vad as string });
      process.stdout.write(v.json === true ? `${JSON.stringify(result, null, 2)}\n` : `${b.format(result as never)}\n`);
    },
  },
};

/** The benchmarks register themselves when the `voxslab/bench` entry is installed. */
async function loadBenches(): Promise<ReadonlyMap<string, Bench>> {
  try {
    const entry: string = 'voxslab/bench';
    await import(entry);
  } catch (cause) {
    throw new UsageError("bench: the benchmarks are not installed (the package's 'voxslab/bench' entry)", { cause });
  }
  return registeredBenches();
}

async function overview(): Promise<string> {
  const benches = await loadBenches().then(
    (b) => `<${[...b.keys()].join('|')}>`,
    () => '<name> (not installed)',
  );
  const lines = ['voxslab — full-duplex speech runtime with planned, capped and accounted memory', '', 'usage:'];
  for (const c of Object.values(COMMANDS)) lines.push(`  ${c.usage.replace('<name>', benches)}`, ...wrap(c.summary, 90).map((l) => `      ${l}`));
  lines.push(
    '  voxslab version',
    '  voxslab help | voxslab <command> --help',
    '',
    'Memory sizes accept 512MiB, 2GiB or plain bytes; VOXSLAB_MEMORY_LIMIT sets the cap.',
    'Exit codes: 0 ok, 1 internal fault, 2 usage, 3 memory limit refused, 4 bad input.',
  );
  return lines.join('\n');
}

async function commandHelp(c: Command): Promise<string> {
  const usage = c === COMMANDS.bench ? c.usage.replace('<name>', `<${[...(await loadBenches()).keys()].join('|')}>`) : c.usage;
  const lines = [`usage: ${usage}`, '', ...wrap(c.summary, 96), '', 'options:', optionHelp(c.keys)];
  if (c === COMMANDS.bench) {
    lines.push('', 'benchmarks:');
    for (const [name, b] of await loadBenches()) lines.push(`  ${name.padEnd(10)}${b.summary}`);
  }
  return lines.join('\n');
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(`${await overview()}\n`);
    return name === undefined ? 2 : 0;
  }
  if (name === 'version' || name === '--version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const command = COMMANDS[name];
  if (command === undefined) throw new UsageError(`unknown command '${name}'; run 'voxslab help'`);
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { ...parseArgsOptions(command.keys), help: { type: 'boolean', short: 'h' } },
  });
  if (values.help === true) {
    process.stdout.write(`${await commandHelp(command)}\n`);
    return 0;
  }
  if (positionals.length > (command.positionals ?? 0)) throw new UsageError(`${name}: unexpected argument '${positionals[command.positionals ?? 0]}'`);
  const given = values as Values;
  const missing = (command.required ?? []).filter((k) => given[flagOf(k)] === undefined);
  if (missing.length > 0) throw new UsageError(`${name}: give ${missing.map((k) => `--${flagOf(k)}`).join(', ')} (see voxslab ${name} --help)`);
  await command.run(given, positionals);
  return 0;
}

/** Runs one command line to its exit code: errors are printed as one line (a trace only for an internal fault). */
export function runCli(argv: string[]): Promise<number> {
  return main(argv).then((code) => code, reportFailure);
}
