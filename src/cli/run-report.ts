import { resolve } from 'node:path';
import { writeWhole } from '../io/files.js';
import type { WavReader } from '../dsp/wav.js';
import type { Conversation } from '../core/conversation.js';

/** A stage's compute helpers in the run line: ` (helpers @1, @0+1)`, or nothing without any. */
export function helperText(helpers: number[][]): string {
  return helpers.length === 0 ? '' : ` (helpers ${helpers.map((h) => `@${h.join('+')}`).join(', ')})`;
}

export interface Job {
  input: string;
  output: string;
  /** Where the reply is written until the run succeeds (then renamed to `output`). */
  staging: string;
  reader: WavReader;
  close(): void;
  conversation?: Conversation;
}

/** Milliseconds kept to a microsecond in reports. */
export const ms = (x: number): number => Math.round(x * 1000) / 1000;
/** The longest the pipeline loop blocks before it lets the event loop in (a worker's failure is seen there). */
export const YIELD_MS = 100;

/** What both engines report of one conversation's turn. */
export interface TurnRecord {
  job: Job;
  rate: number;
  seed: number;
  encoderFrames: number;
  text: string;
  tokens: number[];
  codes: number[][];
  audioFrames: number;
  samples: number;
  stop: string;
  endOfAudio: boolean;
  positions: number;
  compactions: number;
  droppedPositions: number;
  timings: Record<string, { ms: number; count: number }>;
  wallMs: number;
}

export function turnResult(t: TurnRecord, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const info = t.job.reader.info;
  const audioSeconds = t.samples / t.rate;
  return {
    input: { file: t.job.input, sampleRate: info.sampleRate, channels: info.channels, seconds: info.frames / info.sampleRate },
    output: { file: t.job.output, sampleRate: t.rate, samples: t.samples, seconds: audioSeconds, format: 'float32' },
    seed: t.seed,
    encoderFrames: t.encoderFrames,
    text: t.text,
    textTokens: t.tokens,
    audioFrames: t.audioFrames,
    codes: t.codes,
    stop: t.stop,
    endOfAudio: t.endOfAudio,
    positions: t.positions,
    compactions: t.compactions,
    droppedPositions: t.droppedPositions,
    timings: t.timings,
    ...extra,
    wallMs: ms(t.wallMs),
    realTimeFactor: audioSeconds > 0 ? t.wallMs / 1000 / audioSeconds : null,
  };
}

/** The run report (`voxslab.run/v1`) both engines write. */
export function writeReport(
  file: string,
  r: {
    dir: string;
    config: string;
    weightBytes: number;
    options: unknown;
    loadMs: number;
    results: Record<string, unknown>[];
    atReadiness: unknown;
    atEnd: { afterReadiness: { attempts: number } };
    manifest: unknown;
  },
  extra: Record<string, unknown> = {},
): void {
  const report = {
    schema: 'voxslab.run/v1',
    model: { dir: resolve(r.dir), config: r.config, weightBytes: r.weightBytes, options: r.options },
    loadMs: ms(r.loadMs),
    conversations: r.results,
    ...extra,
    allocations: { atReadiness: r.atReadiness, atEnd: r.atEnd, afterReadinessAttempts: r.atEnd.afterReadiness.attempts },
    manifest: r.manifest,
  };
  writeWhole(file, `${JSON.stringify(report, null, 2)}\n`, '--report');
}
