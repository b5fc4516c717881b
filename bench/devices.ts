/**
 * The device path on virtual ALSA devices (a microphone reading a file, a speaker writing one):
 * the addon's PortAudio device (its callback fills the rings; one wake-up per period) against
 * naudiodon's streams, each in a child process of its own. Per library: the intervals between
 * the periods JS ran (their jitter around the period), how long after PortAudio's callback the
 * period ran (the addon's device), and what the path allocated in a window of periods after
 * warm-up (ArrayBuffer bytes, JS heap, the library's Buffers).
 *
 * The virtual devices have no clock of their own: the addon's device holds them to real time,
 * and naudiodon runs them as fast as the periods are taken, so its intervals show its own cost
 * per period, not a device's jitter.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../src/native.js';
import { quantiles } from './util.js';

interface LibraryResult {
  library: string;
  periods: number;
  /** Periods run per second of wall clock, over the device's rate (1: real time). */
  pace: number;
  intervalMs: { p50: number; p99: number; max: number };
  /** |interval − period|, ms. */
  jitterMs: { p50: number; p99: number };
  wakeMs: { p50: number; p99: number; max: number } | null;
  window: number;
  arrayBufferGrowth: number;
  heapGrowth: number;
  libraryBuffers: number;
  overruns: number;
}

/** What the probe child prints (bench/workers/device-probe.ts). */
export interface DeviceProbe {
  library: string;
  periodMs: number;
  seconds: number;
  /** ms between the periods of the second half, and (the addon's device) each one after its callback. */
  intervals: number[];
  wakeMs: number[];
  window: number;
  arrayBufferGrowth: number;
  heapGrowth: number;
  libraryBuffers: number;
  overruns: number;
}

export interface DevicesBenchResult {
  available: boolean;
  libraries: LibraryResult[];
}

/** Virtual devices in a scratch folder: ALSA_CONFIG_PATH for them, and the folder. */
function virtualDevices(seconds: number): { env: NodeJS.ProcessEnv; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-bench-alsa-'));
  const mic = join(dir, 'mic.raw');
  writeFileSync(mic, Buffer.alloc(4 * 48000 * Math.ceil(seconds + 2)));
  const conf = join(dir, 'voxslab.conf');
  writeFileSync(
    conf,
    `pcm.voxmic {\n type file\n slave.pcm "null"\n file "/dev/null"\n infile "${mic}"\n format "raw"\n}\n` +
      `pcm.voxspk {\n type file\n slave.pcm "null"\n file "${join(dir, 'speaker.raw')}"\n format "raw"\n}\n`,
  );
  const env: NodeJS.ProcessEnv = { ...process.env, ALSA_CONFIG_PATH: `/usr/share/alsa/alsa.conf:${conf}` };
  delete env.NODE_OPTIONS;
  return { env, dir };
}

function measure(library: 'portaudio' | 'naudiodon', periods: number): LibraryResult {
  const { env, dir } = virtualDevices(periods / 100);
  try {
    const probe = fileURLToPath(new URL('./workers/device-probe.js', import.meta.url));
    const r = spawnSync(process.execPath, ['--max-semi-space-size=64', probe, String(periods)], {
      env: { ...env, VOXSLAB_AUDIO: library },
      encoding: 'utf8',
      timeout: 120_000,
    });
    const line = r.stdout.split('\n').find((l) => l.startsWith('{'));
    if (r.status !== 0 || line === undefined) throw new Error(`bench devices: the ${library} probe failed: ${r.stderr.trim().split('\n').at(-1) ?? r.status}`);
    const p = JSON.parse(line) as DeviceProbe;
    const max = (xs: number[]): number => Math.round(Math.max(...xs) * 100) / 100;
    return {
      library,
      periods,
      pace: Math.round(((periods * p.periodMs) / 1000 / p.seconds) * 100) / 100,
      intervalMs: { ...quantiles(p.intervals, 2), max: max(p.intervals) },
      jitterMs: quantiles(
        p.intervals.map((d) => Math.abs(d - p.periodMs)),
        2,
      ),
      wakeMs: p.wakeMs.length > 0 ? { ...quantiles(p.wakeMs, 3), max: max(p.wakeMs) } : null,
      window: p.window,
      arrayBufferGrowth: p.arrayBufferGrowth,
      heapGrowth: p.heapGrowth,
      libraryBuffers: p.libraryBuffers,
      overruns: p.overruns,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run(options: { quick?: boolean } = {}): Promise<DevicesBenchResult> {
  const periods = options.quick ? 300 : 1500;
  const libraries = native.audioAvailable() ? (['portaudio', 'naudiodon'] as const) : (['naudiodon'] as const);
  return { available: native.audioAvailable(), libraries: libraries.map((l) => measure(l, periods)) };
}

export function format(r: DevicesBenchResult): string {
  const lines = [r.available ? 'device path on virtual ALSA devices' : 'device path on virtual ALSA devices (the addon has no PortAudio: naudiodon only)'];
  for (const l of r.libraries) {
    lines.push(
      `  ${l.library.padEnd(10)} ${l.periods} periods at ×${l.pace} real time; interval p50 ${l.intervalMs.p50} p99 ${l.intervalMs.p99} max ${l.intervalMs.max} ms; ` +
        `jitter p50 ${l.jitterMs.p50} p99 ${l.jitterMs.p99} ms` +
        (l.wakeMs === null ? '' : `; callback → JS p50 ${l.wakeMs.p50} p99 ${l.wakeMs.p99} max ${l.wakeMs.max} ms`) +
        `; over ${l.window} periods: ${l.arrayBufferGrowth} ArrayBuffer bytes, ${l.libraryBuffers} library Buffers`,
    );
  }
  return lines.join('\n');
}
