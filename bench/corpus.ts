/**
 * The labelled speech set for the duplex tests and `voxslab bench duplex`, made at run time from
 * real speech: espeak-ng utterances (several voices and speeds) and sox noise (white, pink,
 * brown), mixed at a chosen SNR. Labels come from the clean speech, one per 10 ms frame: a frame
 * is speech when its clean RMS is within 40 dB of the utterance's loudest frame, and pauses
 * shorter than 100 ms inside an utterance count as speech (the gaps between syllables).
 *
 * Everything is deterministic: espeak-ng is, and sox's noise is seeded (`-R`).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readMonoWav } from '../src/io/files.js';
import { resampleSignal } from '../src/dsp/resample.js';
import { prng } from '../src/memory/prng.js';

export const RATE = 16000;
export const FRAME = 160;

export const SENTENCES = [
  'What is the weather going to be like in Paris tomorrow morning?',
  'Please remind me to call my mother at six this evening.',
  'Could you read me the last message from the office?',
  'Turn the kitchen lights down to thirty percent.',
  'How long does it take to boil an egg properly?',
  'Set a timer for twelve minutes and tell me when it ends.',
  'I would like to hear something calm while I cook dinner.',
  'Which train gets me to the airport before nine?',
  'Stop, that is not what I asked for at all.',
  'Tell me a short story about a lighthouse keeper.',
];

export const VOICES = ['en-us', 'en-gb', 'en-gb-scotland', 'en-gb-x-rp'];
export const SPEEDS = [140, 165, 190];
export type NoiseKind = 'white' | 'pink' | 'brown';
export const NOISES: NoiseKind[] = ['white', 'pink', 'brown'];

function which(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Whether espeak-ng and sox are installed (the set cannot be made without them). */
export function corpusTools(): boolean {
  return which('espeak-ng') && which('sox');
}

function to16k(file: string): Float32Array {
  const { rate, samples } = readMonoWav(file);
  return rate === RATE ? samples : resampleSignal(samples, rate, RATE);
}

const cache = new Map<string, Float32Array>();

/** One utterance at 16 kHz, peak-normalised to 0.5. */
export function utterance(text: string, voice: string, speed: number): Float32Array {
  const key = `${voice}|${speed}|${text}`;
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-corpus-'));
  try {
    const file = join(dir, 'u.wav');
    execFileSync('espeak-ng', ['-v', voice, '-s', String(speed), '-w', file, text], { stdio: 'ignore' });
    const x = to16k(file);
    let peak = 0;
    for (const v of x) peak = Math.max(peak, Math.abs(v));
    const s = peak > 0 ? 0.5 / peak : 1;
    const y = Float32Array.from(x, (v) => v * s);
    cache.set(key, y);
    return y;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `seconds` of sox noise at 16 kHz, unit RMS, the same for the same arguments. */
export function noise(kind: NoiseKind, seconds: number): Float32Array {
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-noise-'));
  try {
    const file = join(dir, 'n.wav');
    execFileSync('sox', ['-R', '-n', '-r', String(RATE), '-c', '1', '-b', '32', '-e', 'floating-point', file, 'synth', String(seconds), `${kind}noise`], {
      stdio: 'ignore',
    });
    const x = readMonoWav(file).samples;
    return scaleToRms(x, 1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function rms(x: Float32Array, from = 0, to = x.length): number {
  let e = 0;
  for (let i = from; i < to; i++) e += x[i]! * x[i]!;
  return Math.sqrt(e / Math.max(1, to - from));
}

function scaleToRms(x: Float32Array, target: number): Float32Array {
  const r = rms(x);
  const s = r > 0 ? target / r : 0;
  return Float32Array.from(x, (v) => v * s);
}

/**
 * The assistant's voice for echo tests: four sentences in four voices at four speeds, back to
 * back with 150 ms pauses, `seconds` long at 16 kHz.
 */
export function assistantVoice(seconds: number): Float32Array {
  const lines = [
    'I can help with that. The forecast says light rain in the afternoon.',
    'Your next meeting starts at ten, in the small room on the second floor.',
    'Here is a recipe that takes about twenty minutes from start to finish.',
    'The train to the airport leaves every fifteen minutes from platform four.',
  ];
  const voices = ['en-us', 'en-gb', 'en-gb-scotland', 'en-gb-x-rp'];
  const x = new Float32Array(Math.round(seconds * RATE));
  for (let k = 0, at = 0; at < x.length; k++) {
    const u = utterance(lines[k % lines.length]!, voices[k % voices.length]!, 150 + 10 * (k % 4));
    x.set(u.subarray(0, Math.min(u.length, x.length - at)), at);
    at += u.length + 2400;
  }
  return x;
}

/** Frame labels of one clean utterance (see the head comment). */
export function labelFrames(x: Float32Array): Uint8Array {
  const frames = Math.floor(x.length / FRAME);
  const e = new Float64Array(frames);
  let max = 0;
  for (let f = 0; f < frames; f++) {
    e[f] = rms(x, f * FRAME, (f + 1) * FRAME);
    max = Math.max(max, e[f]!);
  }
  const l = new Uint8Array(frames);
  for (let f = 0; f < frames; f++) l[f] = e[f]! >= max * 0.01 ? 1 : 0;
  // Fill pauses shorter than 100 ms between speech frames.
  let last = -1;
  for (let f = 0; f < frames; f++) {
    if (l[f] === 0) continue;
    if (last >= 0 && f - last - 1 > 0 && f - last - 1 < 10) l.fill(1, last + 1, f);
    last = f;
  }
  return l;
}

export interface Scene {
  /** The mixture at 16 kHz. */
  signal: Float32Array;
  /** The clean speech alone. */
  speech: Float32Array;
  /** One label per 10 ms frame of `signal`. */
  labels: Uint8Array;
  /** [start, end) samples of each utterance. */
  segments: [number, number][];
}

export interface SceneOptions {
  seed: number;
  utterances: number;
  /** Speech-to-noise ratio over the speech frames, dB; Infinity for no noise. */
  snrDb: number;
  noise: NoiseKind;
  /** Silence before, between and after utterances, seconds. */
  gap?: [number, number];
}

/** Utterances with silences between them, noise at `snrDb`, and frame labels. */
export function scene(o: SceneOptions): Scene {
  const rand = prng(o.seed);
  const [g0, g1] = o.gap ?? [0.6, 1.8];
  const parts: { x: Float32Array; at: number }[] = [];
  let at = Math.round((g0 + rand() * (g1 - g0)) * RATE);
  for (let u = 0; u < o.utterances; u++) {
    const text = SENTENCES[Math.floor(rand() * SENTENCES.length)]!;
    const voice = VOICES[Math.floor(rand() * VOICES.length)]!;
    const speed = SPEEDS[Math.floor(rand() * SPEEDS.length)]!;
    const x = utterance(text, voice, speed);
    at = Math.ceil(at / FRAME) * FRAME;
    parts.push({ x, at });
    at += x.length + Math.round((g0 + rand() * (g1 - g0)) * RATE);
  }
  const total = Math.ceil(at / FRAME) * FRAME;
  const speech = new Float32Array(total);
  const labels = new Uint8Array(total / FRAME);
  const segments: [number, number][] = [];
  for (const p of parts) {
    speech.set(p.x, p.at);
    labels.set(labelFrames(p.x), p.at / FRAME);
    segments.push([p.at, p.at + p.x.length]);
  }
  const signal = Float32Array.from(speech);
  if (Number.isFinite(o.snrDb)) {
    let e = 0;
    let n = 0;
    for (let f = 0; f < labels.length; f++) {
      if (labels[f] === 0) continue;
      for (let i = f * FRAME; i < (f + 1) * FRAME; i++) e += speech[i]! * speech[i]!;
      n += FRAME;
    }
    const speechRms = Math.sqrt(e / Math.max(1, n));
    const nz = noise(o.noise, total / RATE + 0.1);
    const g = speechRms / 10 ** (o.snrDb / 20);
    for (let i = 0; i < total; i++) signal[i] = signal[i]! + g * nz[i]!;
  }
  return { signal, speech, labels, segments };
}

/** Frame-level precision, recall and F1 of `decisions` against `labels`. */
export function f1(decisions: Uint8Array, labels: Uint8Array): { precision: number; recall: number; f1: number } {
  let tp = 0;
  let fp = 0;
  let fn = 0;
  const n = Math.min(decisions.length, labels.length);
  for (let i = 0; i < n; i++) {
    if (decisions[i] === 1 && labels[i] === 1) tp++;
    else if (decisions[i] === 1) fp++;
    else if (labels[i] === 1) fn++;
  }
  const precision = tp / Math.max(1, tp + fp);
  const recall = tp / Math.max(1, tp + fn);
  return { precision, recall, f1: (2 * precision * recall) / Math.max(1e-12, precision + recall) };
}
