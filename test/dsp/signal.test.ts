import t from 'tap';
import { Resampler } from '../../src/dsp/resample.js';
import { MelFrontend, normaliseRows } from '../../src/dsp/mel.js';
import { StreamingISTFT } from '../../src/dsp/istft.js';
import { RealFFT } from '../../src/dsp/fft.js';
import { arenaWorkspace, measureWorkspace } from '../../src/dsp/workspace.js';
import { MemoryDomain } from '../../src/memory/index.js';
import '../../src/core/categories.js';
import { allocationProbe, prng } from '../helpers.js';

const CHUNKS = [1, 7, 160, 441, 4096];

function resampleAll(r: Resampler, x: Float32Array, chunk: number): Float32Array {
  const out = new Float32Array(r.outputLength(x.length) + 1);
  let n = 0;
  for (let i = 0; i < x.length; i += chunk) n += r.push(x.subarray(i, i + chunk), out, n);
  n += r.finish(out, n);
  return out.subarray(0, n);
}

function sine(rate: number, hz: number, seconds: number, amp = 0.5): Float32Array {
  return Float32Array.from({ length: Math.round(rate * seconds) }, (_, i) => amp * Math.sin((2 * Math.PI * hz * i) / rate));
}

t.test('resampler: streaming equals one whole pass, bit for bit', async (t) => {
  const r = prng(9);
  const x = Float32Array.from({ length: 12_000 }, () => r() * 2 - 1);
  for (const [a, b] of [
    [48000, 16000],
    [16000, 48000],
    [44100, 16000],
    [16000, 44100],
    [24000, 48000],
    [24000, 44100],
  ] as const) {
    const whole = resampleAll(new Resampler(a, b), x, x.length);
    t.equal(whole.length, Math.ceil((x.length * b) / a), `${a}→${b}: ceil(N·out/in) samples`);
    for (const c of CHUNKS) {
      const part = resampleAll(new Resampler(a, b), x, c);
      const same = part.length === whole.length && part.every((v, i) => Object.is(v, whole[i]));
      t.ok(same, `${a}→${b} in chunks of ${c}`, { diagnostic: false });
    }
  }
});

t.test('resampler: at equal rates it is the identity, bit for bit, in any chunking, with no delay', async (t) => {
  const r = prng(11);
  // Full-band noise: a low-pass at equal rates would change the top of the band.
  const x = Float32Array.from({ length: 9_000 }, () => r() * 2 - 1);
  for (const rate of [16000, 24000, 48000]) {
    for (const c of CHUNKS) {
      const rs = new Resampler(rate, rate);
      const y = resampleAll(rs, x, c);
      t.ok(y.length === x.length && y.every((v, i) => Object.is(v, x[i])), `${rate}→${rate} in chunks of ${c}`, { diagnostic: false });
    }
    t.equal(new Resampler(rate, rate).gainAt(0.49 * rate), 1, 'flat to Nyquist');
  }
  // The allocation probe: the identity's push allocates nothing either.
  const rs = new Resampler(16000, 16000);
  const out = new Float32Array(x.length);
  const probe = allocationProbe(2000, () => {
    rs.push(x, out, 0, 1024);
  });
  t.ok(probe.heap >= 0 && probe.heap < 1024, `JS heap growth over 2000 pushes: ${probe.heap} bytes (the probe's own)`);
  t.ok(probe.arrayBuffers <= 0);
});

t.test('resampler: a 1 kHz sine survives 48k→16k→48k above 90 dB SNR', async (t) => {
  const x = sine(48000, 1000, 1);
  const y = resampleAll(new Resampler(16000, 48000), resampleAll(new Resampler(48000, 16000), x, 4096), 4096);
  t.equal(y.length, x.length, 'zero delay: same length, aligned');
  // Away from the abrupt start and end of the test tone (broadband transients), 0.1 s each.
  let sig = 0;
  let err = 0;
  for (let i = 4800; i < x.length - 4800; i++) {
    sig += (x[i] as number) ** 2;
    err += ((y[i] as number) - (x[i] as number)) ** 2;
  }
  const snr = 10 * Math.log10(sig / err);
  t.ok(snr > 90, `SNR ${snr.toFixed(1)} dB`);
});

t.test('resampler: content above the lower Nyquist is removed', async (t) => {
  const x = sine(48000, 9000, 0.5); // above 8 kHz: must not alias into 16 kHz output
  const y = resampleAll(new Resampler(48000, 16000), x, 4096);
  let e = 0;
  for (let i = 200; i < y.length - 200; i++) e = Math.max(e, Math.abs(y[i] as number));
  t.ok(20 * Math.log10(e / 0.5) < -100, `9 kHz into 16 kHz: residue ${(20 * Math.log10(e / 0.5)).toFixed(1)} dB`);
  t.throws(() => new Resampler(0, 16000), /input rate must be an integer from 1000/);
  t.throws(() => new Resampler(16000, 16000.5), /output rate/);
});

/** Independent float64 reference from the formulas: naive DFT, Slaney filters, NeMo framing. */
function referenceMel(x: Float32Array): number[][] {
  const L = x.length;
  const y = Array.from(x, (v, i) => (i === 0 ? v : v - 0.97 * (x[i - 1] as number)));
  const rows = 1 + Math.floor(L / 160);
  const mel = (f: number) => (f < 1000 ? (3 * f) / 200 : 15 + (27 * Math.log(f / 1000)) / Math.log(6.4));
  const hz = (m: number) => (m < 15 ? (200 * m) / 3 : 1000 * Math.exp(((m - 15) * Math.log(6.4)) / 27));
  const pts = Array.from({ length: 130 }, (_, i) => hz((mel(8000) * i) / 129));
  const out: number[][] = [];
  for (let t = 0; t < rows; t++) {
    const frame = Array.from({ length: 512 }, (_, k) => {
      const j = t * 160 - 256 + k;
      const w = k >= 56 && k < 456 ? 0.5 - 0.5 * Math.cos((2 * Math.PI * (k - 56)) / 399) : 0;
      return j >= 0 && j < L ? w * (y[j] as number) : 0;
    });
    const power = Array.from({ length: 257 }, (_, k) => {
      let re = 0;
      let im = 0;
      for (let j = 0; j < 512; j++) {
        re += (frame[j] as number) * Math.cos((2 * Math.PI * j * k) / 512);
        im -= (frame[j] as number) * Math.sin((2 * Math.PI * j * k) / 512);
      }
      return re * re + im * im;
    });
    out.push(
      Array.from({ length: 128 }, (_, m) => {
        let acc = 0;
        for (let k = 0; k < 257; k++) {
          const f = (k * 16000) / 512;
          const w = Math.max(0, Math.min((f - pts[m]!) / (pts[m + 1]! - pts[m]!), (pts[m + 2]! - f) / (pts[m + 2]! - pts[m + 1]!)));
          acc += ((w * 2) / (pts[m + 2]! - pts[m]!)) * power[k]!;
        }
        return Math.log(acc + 2 ** -24);
      }),
    );
  }
  return out;
}

function melAll(x: Float32Array, chunk: number): Float32Array {
  const m = new MelFrontend();
  const out = new Float32Array(m.rowsFor(x.length) * 128);
  for (let i = 0; i < x.length; i += chunk) m.push(x.subarray(i, i + chunk), out);
  m.finish(out);
  t.equal(m.rows, m.rowsFor(x.length));
  return out;
}

t.test('mel rows match a float64 reference; normalisation follows NeMo', async (t) => {
  const r = prng(4);
  const x = Float32Array.from({ length: 5 * 1600 + 37 }, (_, i) => 0.3 * Math.sin(i * 0.05) + 0.2 * (r() - 0.5));
  const got = melAll(x, 4096);
  const ref = referenceMel(x);
  t.equal(got.length / 128, 1 + Math.floor(x.length / 160), 'frames = 1 + L // 160');
  let worst = 0;
  ref.forEach((row, i) => {
    row.forEach((v, m) => {
      worst = Math.max(worst, Math.abs(v - (got[i * 128 + m] as number)));
    });
  });
  t.ok(worst < 1e-4, `raw rows within 1e-4 (max ${worst.toExponential(2)})`);
  const rows = ref.length;
  const valid = Math.floor(x.length / 160);
  const norm = got.slice();
  normaliseRows(norm, rows, 128, valid, new Float64Array(256));
  let worstN = 0;
  for (let m = 0; m < 128; m++) {
    const col = ref.slice(0, valid).map((row) => row[m]!);
    const mean = col.reduce((a, b) => a + b, 0) / valid;
    const std = Math.sqrt(col.reduce((a, b) => a + (b - mean) ** 2, 0) / (valid - 1)) + 1e-5;
    for (let i = 0; i < rows; i++) {
      const want = i < valid ? (ref[i]![m]! - mean) / std : 0;
      worstN = Math.max(worstN, Math.abs(want - (norm[i * 128 + m] as number)));
    }
  }
  t.ok(worstN < 1e-4, `normalised rows within 1e-4 (max ${worstN.toExponential(2)})`);
  t.ok(
    norm.subarray(valid * 128).every((v) => v === 0),
    'the frame past the valid length is zero',
  );
});

t.test('raw mel rows stream: any chunking equals one pass, bit for bit', async (t) => {
  const r = prng(8);
  const x = Float32Array.from({ length: 16000 + 123 }, () => r() - 0.5);
  const whole = melAll(x, x.length);
  for (const c of CHUNKS) {
    const part = melAll(x, c);
    t.ok(
      part.every((v, i) => Object.is(v, whole[i])),
      `chunks of ${c}`,
    );
  }
});

t.test('a pure tone lands in the right mel bin', async (t) => {
  const m = new MelFrontend();
  for (const hz of [300, 1000, 3000, 6000]) {
    const x = sine(16000, hz, 0.5);
    const out = new Float32Array(m.rowsFor(x.length) * 128);
    m.reset();
    m.push(x, out);
    m.finish(out);
    const row = out.subarray(20 * 128, 21 * 128);
    const best = row.indexOf(Math.max(...row));
    // The filter whose centre frequency is nearest the tone.
    const melOf = (f: number) => (f < 1000 ? (3 * f) / 200 : 15 + (27 * Math.log(f / 1000)) / Math.log(6.4));
    const expected = Math.round((melOf(hz) / melOf(8000)) * 129) - 1;
    t.ok(Math.abs(best - expected) <= 1, `${hz} Hz peaks in bin ${best} (centre bin ${expected})`);
  }
});

t.test('ISTFT: STFT → ISTFT reconstructs; streaming emits 1440 then 1920 per code frame', async (t) => {
  const n = 1280;
  const hop = 320;
  const frames = 48;
  const r = prng(2);
  const x = Float64Array.from({ length: frames * hop }, () => r() * 2 - 1);
  // STFT with "same" padding of (n − hop)/2 and a periodic Hann window.
  const pad = (n - hop) / 2;
  const fft = new RealFFT(n);
  const values = new Float32Array(frames * 2 * 641);
  const frame = new Float64Array(n);
  const spec = new Float64Array(2 * 641);
  for (let f = 0; f < frames; f++) {
    for (let j = 0; j < n; j++) {
      const i = f * hop - pad + j;
      frame[j] = i >= 0 && i < x.length ? (x[i] as number) * (0.5 - 0.5 * Math.cos((2 * Math.PI * j) / n)) : 0;
    }
    fft.forward(frame, spec);
    for (let k = 0; k < 641; k++) {
      values[f * 1282 + k] = Math.log(Math.hypot(spec[2 * k]!, spec[2 * k + 1]!));
      values[f * 1282 + 641 + k] = Math.atan2(spec[2 * k + 1]!, spec[2 * k]!);
    }
  }
  const istft = new StreamingISTFT();
  const out = new Float32Array(frames * hop);
  let got = 0;
  const perCodeFrame: number[] = [];
  for (let f = 0; f < frames; f++) {
    const k = istft.pushFrame(values, f * 1282, out, got);
    got += k;
    if (f % 6 === 5) perCodeFrame.push(k + (perCodeFrame.length === 0 ? got - k : 0));
  }
  t.equal(perCodeFrame[0], 1440, 'first code frame (6 frames): 1440 samples');
  const tail = istft.finish(out, got);
  t.equal(tail, 480, 'finish flushes the last 480');
  got += tail;
  t.equal(got, frames * hop, '"same" length: one hop per frame');
  let num = 0;
  let den = 0;
  for (let i = 0; i < x.length; i++) {
    num += ((out[i] as number) - (x[i] as number)) ** 2;
    den += (x[i] as number) ** 2;
  }
  const rel = Math.sqrt(num / den);
  t.ok(rel < 1e-5, `relative error ${rel.toExponential(2)}`);

  // Streaming equals batch: the same frames pushed again after a reset give the same bits.
  istft.reset();
  const again = new Float32Array(frames * hop);
  let g2 = 0;
  const sizes: number[] = [];
  for (let f = 0; f < frames; f++) {
    const k = istft.pushFrame(values, f * 1282, again, g2);
    g2 += k;
    if (f % 6 === 5) sizes.push(k);
  }
  g2 += istft.finish(again, g2);
  t.ok(
    again.every((v, i) => Object.is(v, out[i])),
    'identical after reset',
  );
});

t.test('steady-state processing allocates nothing (buffers from a sealed arena)', async (t) => {
  const domain = MemoryDomain.create({ limit: '256MiB' });
  const owner = domain.owner('conversation', 0);
  const sizeOf = (build: (ws: ReturnType<typeof measureWorkspace>['workspace']) => unknown) => {
    const m = measureWorkspace(domain.policy);
    build(m.workspace);
    return m.bytes();
  };
  const mk = {
    mel: (ws: Parameters<typeof arenaWorkspace>[0] extends never ? never : ReturnType<typeof measureWorkspace>['workspace']) => new MelFrontend({}, ws),
    rs: (ws: ReturnType<typeof measureWorkspace>['workspace']) => new Resampler(48000, 16000, {}, ws),
    is: (ws: ReturnType<typeof measureWorkspace>['workspace']) => new StreamingISTFT({}, ws),
  };
  const arena = domain.createArena(owner, 'dsp', {
    bytes: sizeOf(mk.mel) + sizeOf(mk.rs) + sizeOf(mk.is) + domain.policy.arenaBytes([480 * 4, 4 * 200, 128 * 4000 * 4, 1282 * 4, 320 * 4]),
  });
  const mel = new MelFrontend({}, arenaWorkspace(arena, 'workspace.frontend', 'mel'));
  const rs = new Resampler(48000, 16000, {}, arenaWorkspace(arena, 'capture', 'resampler'));
  const is = new StreamingISTFT({}, arenaWorkspace(arena, 'workspace.detokenizer', 'istft'));
  const pcm48 = arena.carve('pcm48', 'capture', Float32Array, 480);
  const pcm16 = arena.carve('pcm16', 'capture', Float32Array, rs.maxOutput(480));
  const rows = arena.carve('rows', 'workspace.frontend', Float32Array, 128 * 4000);
  const bins = arena.carve('bins', 'workspace.detokenizer', Float32Array, 1282);
  const audio = arena.carve('audio', 'playback.payload', Float32Array, 320);
  arena.seal();
  for (let i = 0; i < pcm48.length; i++) pcm48[i] = Math.sin(i / 7);
  bins.fill(-3);
  const before = domain.snapshot();
  let frames = 0;
  const probe = allocationProbe(300, () => {
    const n = rs.push(pcm48, pcm16, 0);
    if (mel.rows + 4 >= 4000) mel.reset();
    mel.push(pcm16, rows, n);
    is.pushFrame(bins, 0, audio, 0);
    frames++;
  });
  const after = domain.snapshot();
  t.ok(probe.arrayBuffers <= 0, `no ArrayBuffer growth (${probe.arrayBuffers} bytes; a backing store released meanwhile makes it negative)`);
  t.ok(probe.heap >= 0 && probe.heap < 1024, `JS heap growth over 300 chunks: ${probe.heap} bytes (window ${probe.windows})`);
  t.same(after.allocations, before.allocations, 'no carve or slab after readiness');
  t.ok(frames >= 1200);
  // Negative control: the probe does see a small allocation per call.
  let keep: Float32Array | undefined;
  const control = allocationProbe(300, () => {
    keep = new Float32Array(4);
  });
  t.ok(control.heap >= 300 * 16, `control: allocating 4 floats per call shows ${control.heap} bytes in every one of ${control.windows > 0 ? 50 : 0} windows`);
  t.ok(keep !== undefined);
});

t.test('resampler: rates that share almost no factor are refused at once, not designed for seconds', async (t) => {
  const { MAX_PHASES, Resampler: R } = await import('../../src/dsp/resample.js');
  const t0 = performance.now();
  t.throws(() => new R(16000, 384001), /resampling 16000 Hz to 384001 Hz needs 384001 filter phases \(at most 65536\)/);
  t.ok(performance.now() - t0 < 1000, 'refused before any design work');
  t.doesNotThrow(() => new R(44099, 48000), `44099 → 48000 Hz needs 48000 phases, within ${MAX_PHASES}`);
  for (const [a, b] of [
    [16000, 44100],
    [44100, 48000],
    [24000, 22050],
    [8000, 192000],
  ])
    t.doesNotThrow(() => new R(a!, b!), `${a} → ${b} Hz`);
});
