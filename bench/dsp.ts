/**
 * `voxslab bench dsp`: resampler quality for each rate pair (passband ripple, stopband
 * attenuation from the coefficients in use, THD+N of sines through the streaming code, beside
 * sox `rate -v` on the same signals when sox is installed) and throughput of resampling, mel
 * and ISTFT as seconds of audio per CPU second.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Resampler } from '../src/dsp/resample.js';
import { MelFrontend } from '../src/dsp/mel.js';
import { StreamingISTFT } from '../src/dsp/istft.js';
import { encodeWav, memorySource, readWavMono } from '../src/dsp/wav.js';
import { round } from './util.js';

const PAIRS: [number, number][] = [
  [48000, 16000],
  [16000, 48000],
  [44100, 16000],
  [16000, 44100],
  [24000, 48000],
  [24000, 44100],
];

function resampleAll(r: Resampler, x: Float32Array): Float32Array {
  const out = new Float32Array(r.outputLength(x.length) + 1);
  let n = 0;
  for (let i = 0; i < x.length; i += 4096) n += r.push(x.subarray(i, i + 4096), out, n);
  n += r.finish(out, n);
  return out.subarray(0, n);
}

/** THD+N in dB: residual after a least-squares fit of the tone at `hz`, over the interior. */
function thdN(y: Float32Array, rate: number, hz: number): number {
  const a = Math.floor(y.length * 0.2);
  const b = Math.floor(y.length * 0.8);
  let ss = 0;
  let cc = 0;
  let sc = 0;
  let ys = 0;
  let yc = 0;
  for (let i = a; i < b; i++) {
    const s = Math.sin((2 * Math.PI * hz * i) / rate);
    const c = Math.cos((2 * Math.PI * hz * i) / rate);
    ss += s * s;
    cc += c * c;
    sc += s * c;
    ys += (y[i] as number) * s;
    yc += (y[i] as number) * c;
  }
  const det = ss * cc - sc * sc;
  const A = (ys * cc - yc * sc) / det;
  const B = (yc * ss - ys * sc) / det;
  let sig = 0;
  let res = 0;
  for (let i = a; i < b; i++) {
    const f = A * Math.sin((2 * Math.PI * hz * i) / rate) + B * Math.cos((2 * Math.PI * hz * i) / rate);
    sig += f * f;
    res += ((y[i] as number) - f) ** 2;
  }
  return 10 * Math.log10(res / sig);
}

const tone = (rate: number, hz: number, seconds: number): Float32Array =>
  Float32Array.from({ length: Math.round(rate * seconds) }, (_, i) => 0.5 * Math.sin((2 * Math.PI * hz * i) / rate));

function soxResample(x: Float32Array, from: number, to: number, dir: string): Float32Array | null {
  const a = join(dir, 'in.wav');
  const b = join(dir, 'out.wav');
  writeFileSync(a, encodeWav({ sampleRate: from, channels: 1, format: 'float32', extensible: false }, x));
  const r = spawnSync('sox', [a, '-e', 'floating-point', '-b', '32', b, 'rate', '-v', String(to)]);
  if (r.status !== 0) return null;
  return readWavMono(memorySource(readFileSync(b), b)).samples;
}

/** CPU seconds of `body`: the fastest of three runs (the first ones also warm the JIT). */
function cpuSeconds(body: () => void): number {
  let best = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 3; run++) {
    const c0 = process.cpuUsage();
    body();
    const c = process.cpuUsage(c0);
    best = Math.min(best, (c.user + c.system) / 1e6);
  }
  return best;
}

export interface DspBenchResult {
  bench: 'dsp';
  sox: string | null;
  resamplers: {
    pair: string;
    taps: number;
    passbandRippleDb: number;
    stopbandAttenuationDb: number;
    thdN: { hz: number; voxslabDb: number; soxDb: number | null }[];
  }[];
  throughput: { what: string; audioSeconds: number; cpuSeconds: number; realtimeRatio: number }[];
  targets: { stopbandDb: number; rippleDb: number };
}

export async function run(options: { quick?: boolean } = {}): Promise<DspBenchResult> {
  const soxVersion = spawnSync('sh', ['-c', 'command -v sox']).status === 0 ? execFileSync('sox', ['--version'], { encoding: 'utf8' }).trim() : null;
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-bench-dsp-'));
  const resamplers: DspBenchResult['resamplers'] = [];
  for (const [a, b] of PAIRS) {
    const r = new Resampler(a, b);
    const low = Math.min(a, b);
    let ripple = 0;
    for (let i = 0; i <= 200; i++) ripple = Math.max(ripple, Math.abs(20 * Math.log10(r.gainAt((0.45 * low * i) / 200))));
    let worst = 0;
    const top = (a * r.up) / 2;
    const points = options.quick === true ? 300 : 1500;
    for (let i = 0; i <= points; i++) worst = Math.max(worst, r.gainAt(0.5 * low + ((top - 0.5 * low) * i) / points));
    const thd: DspBenchResult['resamplers'][number]['thdN'] = [];
    for (const frac of [0.05, 0.2, 0.4]) {
      const hz = Math.round(frac * low);
      const x = tone(a, hz, 0.5);
      const ours = thdN(resampleAll(new Resampler(a, b), x), b, hz);
      const theirs = soxVersion !== null ? soxResample(x, a, b, dir) : null;
      thd.push({ hz, voxslabDb: round(ours, 1), soxDb: theirs === null ? null : round(thdN(theirs, b, hz), 1) });
    }
    resamplers.push({
      pair: `${a}->${b}`,
      taps: r.taps,
      passbandRippleDb: Number(ripple.toExponential(2)),
      stopbandAttenuationDb: round(-20 * Math.log10(worst), 1),
      thdN: thd,
    });
  }
  rmSync(dir, { recursive: true, force: true });

  const seconds = options.quick === true ? 2 : 10;
  const throughput: DspBenchResult['throughput'] = [];
  for (const [a, b] of [
    [48000, 16000],
    [16000, 48000],
    [44100, 16000],
    [24000, 48000],
  ] as const) {
    const x = tone(a, 440, seconds);
    const r = new Resampler(a, b);
    const out = new Float32Array(r.maxOutput(4096));
    resampleAll(new Resampler(a, b), x.subarray(0, a)); // warm up
    const cpu = cpuSeconds(() => {
      r.reset();
      for (let i = 0; i < x.length; i += 4096) r.push(x.subarray(i, i + 4096), out, 0);
    });
    throughput.push({ what: `resample ${a}->${b}`, audioSeconds: seconds, cpuSeconds: round(cpu, 4), realtimeRatio: round(seconds / cpu, 0) });
  }
  {
    const x = tone(16000, 440, seconds);
    const mel = new MelFrontend();
    const rows = new Float32Array(mel.rowsFor(x.length) * 128);
    mel.push(x.subarray(0, 16000), rows);
    mel.reset();
    const cpu = cpuSeconds(() => {
      mel.reset();
      for (let i = 0; i < x.length; i += 1600) mel.push(x.subarray(i, i + 1600), rows);
      mel.finish(rows);
    });
    throughput.push({ what: 'log-mel 16 kHz', audioSeconds: seconds, cpuSeconds: round(cpu, 4), realtimeRatio: round(seconds / cpu, 0) });
  }
  {
    const frames = seconds * 75;
    const values = Float32Array.from({ length: 1282 }, (_, i) => (i < 641 ? -2 : i * 0.01));
    const is = new StreamingISTFT();
    const out = new Float32Array(1024);
    for (let f = 0; f < 75; f++) is.pushFrame(values, 0, out, 0);
    const cpu = cpuSeconds(() => {
      is.reset();
      for (let f = 0; f < frames; f++) is.pushFrame(values, 0, out, 0);
    });
    throughput.push({ what: 'ISTFT 24 kHz', audioSeconds: seconds, cpuSeconds: round(cpu, 4), realtimeRatio: round(seconds / cpu, 0) });
  }
  return { bench: 'dsp', sox: soxVersion, resamplers, throughput, targets: { stopbandDb: 100, rippleDb: 0.01 } };
}

export function format(r: DspBenchResult): string {
  const lines = [`resampler quality (${r.sox ?? 'sox not installed'}); targets: stopband ≥ ${r.targets.stopbandDb} dB, ripple ≤ ${r.targets.rippleDb} dB`];
  lines.push('  pair            taps   ripple dB   stopband dB   THD+N dB at tones (voxslab / sox -v)');
  for (const q of r.resamplers) {
    const t = q.thdN.map((x) => `${x.hz} Hz ${x.voxslabDb} / ${x.soxDb ?? '-'}`).join(', ');
    lines.push(
      `  ${q.pair.padEnd(14)}${String(q.taps).padStart(6)}${String(q.passbandRippleDb).padStart(12)}${String(q.stopbandAttenuationDb).padStart(14)}   ${t}`,
    );
  }
  lines.push('throughput (seconds of audio per CPU second):');
  for (const t of r.throughput) lines.push(`  ${t.what.padEnd(24)}${String(t.realtimeRatio).padStart(8)}×`);
  return lines.join('\n');
}
