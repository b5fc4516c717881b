import t from 'tap';
import { MemoryDomain, plan } from '../../src/memory/index.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { detokenizerDims, lfm2Pass } from '../../src/model/blocks/backbone.js';
import { Detokenizer, DetokenizerState } from '../../src/model/blocks/detokenizer.js';
import { DETOKENIZER_PREFIX } from '../../src/model/format/image.js';
import { lfm2Reference } from '../reference/lfm2.js';
import { linear64, weights64 } from '../reference/ops.js';
import { allocationProbe, prng, randInt, scratchDir } from '../helpers.js';

const dir = scratchDir('voxslab-detok-');
makeCheckpoint({ config: 'tiny', seed: 51, out: dir, dtype: 'f32' });

function setup(rate: number, turnPositions = 600, batch = 1, conversations = 1) {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { config, image } = loadCheckpoint(dir, domain);
  const t = config.detokenizer;
  const ticket = domain.owner('ticket', 0);
  const hw = plan(lfm2Pass(detokenizerDims(config), batch * t.upsample).build()).highWater;
  const work = domain.createArena(ticket, 'detokenizer', {
    bytes: domain.policy.arenaBytes([hw, batch * t.upsample * t.outBins * 4, (t.upsample * t.hop + t.nFft) * 4, batch * 256 * 256 * 4]),
  });
  const detok = new Detokenizer(config, image, work, heapWorkspace, { turnPositions, batch });
  const states = Array.from({ length: conversations }, (_, i) => {
    const st = domain.createArena(domain.owner('conversation', i), 'detok state', {
      bytes: domain.policy.arenaBytes(DetokenizerState.lfmBytes(config, turnPositions)),
    });
    const state = new DetokenizerState(config, st, heapWorkspace, { turnPositions, outputRate: rate });
    st.seal();
    return state;
  });
  work.seal();
  return { domain, config, image, detok, state: states[0]!, states };
}

t.test('code frames → bins equal a float64 reference with the sliding window; samples stream', async (t) => {
  const { config, image, detok, state, domain } = setup(48000);
  const td = config.detokenizer;
  const D = td.hidden;
  const r = prng(3);
  const frames = 7; // 42 positions: past the window, so the cache drops old rows
  const codes = Array.from({ length: frames }, () => Array.from({ length: 8 }, () => randInt(r, 0, 2047)));
  const out = new Float32Array(detok.maxSamples(state) * (frames + 1));
  const bins: Float32Array[] = [];
  const counts: number[] = [];
  let n = 0;
  const before = domain.snapshot().allocations;
  for (const c of codes) {
    const k = detok.frame(state, c, out, n);
    counts.push(k);
    n += k;
    bins.push(detok.bins.slice());
  }
  const tail = detok.finish(state, out, n);
  n += tail;
  t.same(domain.snapshot().allocations, before, 'no allocation after readiness');
  t.equal(n, frames * 1920 * 2, `${frames} code frames give ${frames} × 80 ms at 48 kHz once flushed`);
  t.ok(counts[0]! < counts[1]!, `the first frame is shorter by the streaming delay (${counts[0]} then ${counts[1]})`);
  // Reference: mean embedding, ×6 repeat, LFM2 over the whole turn, then lin.
  const emb = image.toF32(`${DETOKENIZER_PREFIX}emb.emb.weight`, new Float32Array(8 * 2048 * D));
  const P = frames * td.upsample;
  const input = new Float64Array(P * D);
  codes.forEach((c, f) => {
    for (let j = 0; j < D; j++) {
      let s = 0;
      for (let i = 0; i < 8; i++) s += emb[(i * 2048 + c[i]!) * D + j]!;
      for (let rep = 0; rep < td.upsample; rep++) input[(f * td.upsample + rep) * D + j] = s / 8;
    }
  });
  const { hidden } = lfm2Reference(detokenizerDims(config), `${DETOKENIZER_PREFIX}lfm`, image, input, P);
  const get = weights64(image);
  const ref = linear64(hidden, P, D, get(`${DETOKENIZER_PREFIX}lin.weight`), get(`${DETOKENIZER_PREFIX}lin.bias`), td.outBins);
  let e2 = 0;
  let s2 = 0;
  for (let p = 0; p < P; p++) {
    const got = bins[Math.floor(p / td.upsample)]!;
    const row = p % td.upsample;
    for (let o = 0; o < td.outBins; o++) {
      const want = ref[p * td.outBins + o]!;
      e2 += (got[row * td.outBins + o]! - want) ** 2;
      s2 += want ** 2;
    }
  }
  t.ok(e2 / s2 < 1e-9, `all ${P} frames' bins: NMSE ${(e2 / s2).toExponential(2)}`);
  t.ok(out.subarray(0, n).every(Number.isFinite), 'finite audio');
  // A new turn starts from position 0: the same codes give the same samples.
  state.startTurn();
  const again = new Float32Array(out.length);
  let m = 0;
  for (const c of codes) m += detok.frame(state, c, again, m);
  m += detok.finish(state, again, m);
  t.ok(
    again.subarray(0, m).every((v, i) => Object.is(v, out[i])),
    'startTurn resets positions, caches and overlap',
  );
  t.throws(() => detok.frame(state, [1, 2, 3, 4, 5, 6, 7, 2048], out, 0), /code 2048 of codebook 7 is not 0…2047/);
});

t.test('a code frame allocates nothing in steady state', async (t) => {
  const { detok, state } = setup(44100, 100_000);
  const out = new Float32Array(detok.maxSamples(state));
  const codes = Int32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
  const probe = allocationProbe(30, () => {
    detok.frame(state, codes, out, 0);
  });
  t.ok(probe.heap >= 0 && probe.heap < 1024, `JS heap growth over 30 code frames: ${probe.heap} bytes (window ${probe.windows})`);
  t.ok(probe.arrayBuffers <= 0, `no ArrayBuffer growth (${probe.arrayBuffers} bytes; a backing store released meanwhile makes it negative)`);
});

// Continuous batching: conversations join and leave between calls, at different positions of
// their turns (past the sliding window, so their caches drop rows at different calls).
t.test('frames of several conversations in one call: each gets the samples it gets alone, bit for bit', async (t) => {
  const { detok, states } = setup(48000, 600, 4, 4);
  const alone = setup(48000, 600, 1, 1);
  const r = prng(7);
  const frames = [9, 7, 8, 3];
  const start = [0, 2, 1, 5];
  const codes = frames.map((f) => Array.from({ length: f }, () => Int32Array.from({ length: 8 }, () => randInt(r, 0, 2047))));
  const want = codes.map((cs) => {
    alone.state.startTurn();
    const out = new Float32Array(detok.maxSamples(alone.state) * (cs.length + 1));
    let n = 0;
    for (const c of cs) n += alone.detok.frame(alone.state, c, out, n);
    return out.subarray(0, n + alone.detok.finish(alone.state, out, n));
  });
  const jobs = states.map((state) => ({ state, codes: codes[0]![0]!, pcm: new Float32Array(detok.maxSamples(state)), samples: 0 }));
  const got = states.map(() => [] as number[]);
  const ready: typeof jobs = [];
  let widest = 0;
  for (let call = 0; call < 16; call++) {
    ready.length = 0;
    for (const [i, job] of jobs.entries()) {
      const f = call - start[i]!;
      if (f < 0 || f >= frames[i]!) continue;
      if (f === 0) job.state.startTurn();
      job.codes = codes[i]![f]!;
      ready.push(job);
    }
    if (ready.length === 0) continue;
    widest = Math.max(widest, ready.length);
    detok.frames(ready, ready.length);
    for (const job of ready) got[jobs.indexOf(job)]!.push(...job.pcm.subarray(0, job.samples));
  }
  for (const [i, job] of jobs.entries()) {
    const n = detok.finish(job.state, job.pcm, 0);
    got[i]!.push(...job.pcm.subarray(0, n));
    t.ok(
      got[i]!.length === want[i]!.length && got[i]!.every((v, k) => Object.is(v, want[i]![k])),
      `conversation ${i}: ${frames[i]} frames, the same ${want[i]!.length} samples as alone`,
    );
  }
  t.equal(widest, 4, 'one call served all four');
  t.notOk(
    want[0]!.subarray(0, want[1]!.length).every((v, k) => Object.is(v, want[1]![k])),
    'different codes give different samples (the comparison can fail)',
  );
  t.throws(() => detok.frames(jobs, 5), /5 conversations in one call, at most 4/);
});
