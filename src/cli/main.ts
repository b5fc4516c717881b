#!/usr/bin/env node
/** The `voxslab` command. Exit codes: 0 ok, 1 internal fault, 2 usage, 3 memory limit, 4 bad input. */
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { UsageError, exitCodeOf } from '../memory/errors.js';
import { planConfig, planIntervals } from './plan.js';
import { melFile, resampleFile } from './audio.js';
import { runCommand } from './run.js';
import { makeCheckpoint, type FloatDtype } from '../io/checkpoint.js';
import { quantizeCheckpoint } from '../io/quantize.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const HELP = `voxslab — full-duplex speech runtime with planned, capped and accounted memory

usage:
  voxslab plan --config <tiny|small|lfm2-audio-1.5b|FILE|DIR> [--conversations N] [--context T]
               [--segment SECONDS] [--kv f32|f16] [--slots N] [--json]
                                            memory manifest of a configuration (nothing allocated)
  voxslab plan --intervals FILE.csv [--align N] [--json]
                                            plan a CSV of buffers (header id,lower,upper,size;
                                            live from op lower up to, not including, upper)
  voxslab make-checkpoint --config <tiny|small|lfm2-audio-1.5b> --seed N --out DIR [--dtype f32|f16|bf16|q8|q4]
                                            deterministic synthetic checkpoint in the public layout
  voxslab quantize --in DIR --out DIR --bits 4|8 [--group 32|64]
                                            affine group quantization of a checkpoint (all cores)
  voxslab run --model <DIR|tiny|small> --in A.wav --out B.wav [--in C.wav --out D.wav]
              [--rate HZ] [--report R.json] [--dump DIR] [--seed N] [--context T]
              [--segment SECONDS] [--reply SECONDS] [--threads N] [--kv f32|f16]
              [--engine pipeline|single] [--pin none|STAGE=CPU[+CPU],...] [--slots N] [--realtime]
                                            answer each user segment with speech (float32 WAV at
                                            --rate, default 48000) and print the text reply; a
                                            built-in name is generated on first use; all inputs
                                            at once through the pinned five-stage pipeline
                                            (--engine single: one after the other, one thread)
  voxslab resample --in A.wav --rate HZ --out B.wav
                                            band-limited resampling, every channel kept
  voxslab mel --in A.wav --out M.npy [--raw]
                                            log-mel features of 16 kHz audio, float32 [frames, 128]
  voxslab bench <memory|planner|dsp|kernels|model|pipeline> [--json] [--quick]
  voxslab bench model [--production] [--model DIR]...
                                            --production adds lfm2-audio-1.5b at q4 and q8
                                            (generated once into the checkpoint cache)
  voxslab version
  voxslab help

Memory sizes accept 512MiB, 2GiB or plain bytes; VOXSLAB_MEMORY_LIMIT sets the cap.
Exit codes: 0 ok, 1 internal fault, 2 usage, 3 memory limit refused, 4 bad input.`;

const BENCHES = ['memory', 'planner', 'dsp', 'kernels', 'model', 'pipeline'] as const;

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

async function bench(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      json: { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      production: { type: 'boolean', default: false },
      model: { type: 'string', multiple: true },
    },
  });
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) {
    throw new UsageError(`bench: name one benchmark (${BENCHES.join(', ')})`);
  }
  if (!(BENCHES as readonly string[]).includes(name)) {
    throw new UsageError(`bench: unknown benchmark '${name}' (available: ${BENCHES.join(', ')})`);
  }
  if (name !== 'model' && (values.production === true || values.model !== undefined)) throw new UsageError('bench: --production and --model are options of bench model');
  const mod = (await import(`../../bench/${name}.js`)) as {
    run: (o: { quick: boolean; production: boolean; models: string[] }) => Promise<unknown>;
    format: (r: never) => string;
  };
  const result = await mod.run({ quick: values.quick === true, production: values.production === true, models: values.model ?? [] });
  process.stdout.write(values.json === true ? `${JSON.stringify(result, null, 2)}\n` : `${mod.format(result as never)}\n`);
}

function planCommand(args: string[]): void {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      intervals: { type: 'string' },
      align: { type: 'string' },
      config: { type: 'string' },
      conversations: { type: 'string' },
      context: { type: 'string' },
      segment: { type: 'string' },
      kv: { type: 'string' },
      slots: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  });
  if (positionals.length > 0) throw new UsageError(`plan: unexpected argument '${positionals[0]}'`);
  const json = values.json === true;
  if ((values.intervals === undefined) === (values.config === undefined)) {
    throw new UsageError('plan: give either --config <name|file> or --intervals FILE.csv');
  }
  if (values.intervals !== undefined) {
    process.stdout.write(`${planIntervals(values.intervals, values.align, json)}\n`);
    return;
  }
  const request: Parameters<typeof planConfig>[0] = { config: values.config as string, json };
  for (const k of ['conversations', 'context', 'segment', 'kv', 'slots'] as const) {
    const v = values[k];
    if (v !== undefined) request[k] = v;
  }
  process.stdout.write(`${planConfig(request)}\n`);
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(`${HELP}\n`);
      return command === undefined ? 2 : 0;
    case 'version':
    case '--version':
      process.stdout.write(`${version()}\n`);
      return 0;
    case 'bench':
      await bench(rest);
      return 0;
    case 'plan':
      planCommand(rest);
      return 0;
    case 'make-checkpoint': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { config: { type: 'string' }, seed: { type: 'string' }, out: { type: 'string' }, dtype: { type: 'string', default: 'f32' } },
      });
      if (positionals.length > 0) throw new UsageError(`make-checkpoint: unexpected argument '${positionals[0]}'`);
      if (values.config === undefined || values.seed === undefined || values.out === undefined) {
        throw new UsageError('make-checkpoint: give --config <name> --seed N --out DIR');
      }
      if (!/^\d+$/.test(values.seed) || Number(values.seed) > 0xffffffff) throw new UsageError(`--seed must be an integer from 0 to 4294967295, got '${values.seed}'`);
      const dtype = values.dtype as string;
      if (!['f32', 'f16', 'bf16', 'q8', 'q4'].includes(dtype)) throw new UsageError(`--dtype must be f32, f16, bf16, q8 or q4, got '${dtype}'`);
      if (dtype === 'q8' || dtype === 'q4') {
        // Generate in f32, then quantize with the same tool users run on real checkpoints.
        const tmp = mkdtempSync(join(tmpdir(), 'voxslab-make-'));
        try {
          makeCheckpoint({ config: values.config, seed: Number(values.seed), out: tmp, dtype: 'f32' });
          const r = await quantizeCheckpoint({ input: tmp, output: values.out, bits: dtype === 'q8' ? 8 : 4, group: 64 });
          process.stderr.write(`wrote ${values.out}: ${r.quantized} tensors quantized to ${dtype} (group 64), ${r.kept} kept\n`);
        } finally {
          rmSync(tmp, { recursive: true, force: true });
        }
        return 0;
      }
      const r = makeCheckpoint({ config: values.config, seed: Number(values.seed), out: values.out, dtype: dtype as FloatDtype });
      process.stderr.write(`wrote ${r.files.length} files, ${r.bytes} bytes, to ${values.out}\n`);
      return 0;
    }
    case 'quantize': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { in: { type: 'string' }, out: { type: 'string' }, bits: { type: 'string' }, group: { type: 'string', default: '64' } },
      });
      if (positionals.length > 0) throw new UsageError(`quantize: unexpected argument '${positionals[0]}'`);
      if (values.in === undefined || values.out === undefined || values.bits === undefined) throw new UsageError('quantize: give --in DIR --out DIR --bits 4|8');
      if (values.bits !== '4' && values.bits !== '8') throw new UsageError(`--bits must be 4 or 8, got '${values.bits}'`);
      if (values.group !== '32' && values.group !== '64') throw new UsageError(`--group must be 32 or 64, got '${values.group}'`);
      const r = await quantizeCheckpoint({ input: values.in, output: values.out, bits: Number(values.bits) as 4 | 8, group: Number(values.group) });
      process.stderr.write(`wrote ${values.out}: ${r.quantized} tensors quantized, ${r.kept} kept\n`);
      return 0;
    }
    case 'run': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: {
          model: { type: 'string' },
          in: { type: 'string', multiple: true },
          out: { type: 'string', multiple: true },
          rate: { type: 'string' },
          report: { type: 'string' },
          dump: { type: 'string' },
          seed: { type: 'string' },
          context: { type: 'string' },
          segment: { type: 'string' },
          reply: { type: 'string' },
          threads: { type: 'string' },
          kv: { type: 'string' },
          engine: { type: 'string' },
          pin: { type: 'string' },
          slots: { type: 'string' },
          realtime: { type: 'boolean' },
        },
      });
      if (positionals.length > 0) throw new UsageError(`run: unexpected argument '${positionals[0]}'`);
      if (values.model === undefined || values.in === undefined || values.out === undefined) throw new UsageError('run: give --model DIR --in A.wav --out B.wav');
      const { model, in: inputs, out: outputs, ...rest2 } = values;
      process.stdout.write(`${await runCommand({ model, inputs, outputs, ...rest2 })}\n`);
      return 0;
    }
    case 'resample': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { in: { type: 'string' }, rate: { type: 'string' }, out: { type: 'string' } },
      });
      if (positionals.length > 0) throw new UsageError(`resample: unexpected argument '${positionals[0]}'`);
      if (values.in === undefined || values.rate === undefined || values.out === undefined) throw new UsageError('resample: give --in A.wav --rate HZ --out B.wav');
      process.stderr.write(`${resampleFile(values.in, values.rate, values.out)}\n`);
      return 0;
    }
    case 'mel': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { in: { type: 'string' }, out: { type: 'string' }, raw: { type: 'boolean', default: false } },
      });
      if (positionals.length > 0) throw new UsageError(`mel: unexpected argument '${positionals[0]}'`);
      if (values.in === undefined || values.out === undefined) throw new UsageError('mel: give --in A.wav --out M.npy');
      process.stderr.write(`${melFile(values.in, values.out, values.raw === true)}\n`);
      return 0;
    }
    default:
      throw new UsageError(`unknown command '${command}'; run 'voxslab help'`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    const code = error instanceof TypeError && !('exitCode' in error) && (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? 2 : exitCodeOf(error);
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`voxslab: ${message}\n`);
    if (code === 1 && error instanceof Error && error.stack !== undefined) process.stderr.write(`${error.stack}\n`);
    process.exitCode = code;
  },
);
