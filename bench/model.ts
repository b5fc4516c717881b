/**
 * `voxslab bench model`: time of each model stage on synthetic checkpoints (`tiny`, `small`),
 * single thread, as the cost of one generated 80 ms frame and as a real-time factor:
 * frame = backbone step + Depthformer frame + detokenizer frame + the frame's share of
 * interleaved text steps (6 text steps per 12 audio frames). Also: encoder time per second
 * of user audio, prefill and decode tokens/s. The fastest of several runs is reported.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryDomain, plan } from '../src/memory/index.js';
import { arenaWorkspace, heapWorkspace } from '../src/dsp/workspace.js';
import { loadCheckpoint, makeCheckpoint } from '../src/io/checkpoint.js';
import { ConformerEncoder } from '../src/model/encoder.js';
import { Backbone, backbonePass, BackboneState, backboneStateSizes, detokenizerDims, lfm2Pass } from '../src/model/backbone.js';
import { Depthformer, depthformerPass, depthformerStateFloats } from '../src/model/depthformer.js';
import { Detokenizer, DetokenizerState } from '../src/model/detokenizer.js';
import { AUDIO_SAMPLING, Sampler } from '../src/model/sampler.js';
import { DEFAULT_ENCODER_TILES, encoderPass } from '../src/model/plans.js';
import { fastestSeconds as best, round } from './util.js';

export interface ModelBenchRow {
  config: string;
  parameters: string;
  encoderMsPerSecondOfAudio: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  decodeWithLogitsTokensPerSecond: number;
  depthformerMsPerFrame: number;
  detokenizerMsPerFrame: number;
  frameMs: number;
  realTimeFactor: number;
}

function measure(name: string, quick: boolean): ModelBenchRow {
  const dir = mkdtempSync(join(tmpdir(), 'voxslab-bench-model-'));
  try {
    makeCheckpoint({ config: name, seed: 1, out: dir, dtype: 'f32', progress: false });
    const domain = MemoryDomain.create({ limit: '8GiB' });
    const { config, image, report } = loadCheckpoint(dir, domain);
    const ticket = domain.owner('ticket', 0);
    const conv = domain.owner('conversation', 0);
    const seconds = 5;
    const chunk = 64;
    const context = 2048;
    const hwEnc = plan(encoderPass(config, { segmentSeconds: seconds, tiles: DEFAULT_ENCODER_TILES }).build()).highWater;
    const hwBb = plan(backbonePass(config, chunk).build()).highWater;
    const hwStep = plan(backbonePass(config, 1).build()).highWater;
    const hwDepth = plan(depthformerPass(config).build()).highWater;
    const t = config.detokenizer;
    const hwDet = plan(lfm2Pass(detokenizerDims(config), t.upsample).build()).highWater;
    const work = domain.createArena(ticket, 'work', { bytes: domain.policy.arenaBytes([hwEnc, hwBb, hwDepth, hwDet, t.upsample * t.outBins * 4, (t.upsample * t.hop + t.nFft) * 4, 256 * 256 * 4]) + (64 << 20) });
    const encoder = new ConformerEncoder(config, image, work, heapWorkspace, { segmentSeconds: seconds });
    const prefill = new Backbone(config, image, work, heapWorkspace, { chunk, context });
    const stepArena = domain.createArena(domain.owner('ticket', 1), 'step', { bytes: domain.policy.arenaBytes([hwStep]) });
    const step = new Backbone(config, image, stepArena, heapWorkspace, { chunk: 1, context });
    const stateArena = domain.createArena(conv, 'state', { bytes: domain.policy.arenaBytes([...backboneStateSizes(config, context).map((s) => s.bytes), depthformerStateFloats(config) * 4, ...DetokenizerState.lfmBytes(config, 100_000)]) + (8 << 20) });
    const state = new BackboneState(config, stateArena, context);
    const depthKv = stateArena.carve('depth_kv', 'recurrence', Float32Array, depthformerStateFloats(config));
    const depth = new Depthformer(config, image, work, heapWorkspace, depthKv);
    const detok = new Detokenizer(config, image, work, heapWorkspace, { turnPositions: 100_000 });
    const detState = new DetokenizerState(config, stateArena, arenaWorkspace(stateArena, 'recurrence', 'detok'), { turnPositions: 100_000, outputRate: 48000 });
    const runs = quick ? 2 : 5;
    const T = 1 + seconds * 100;
    const mel = Float32Array.from({ length: T * 128 }, (_, i) => Math.sin(i * 0.013) - 4);
    const encS = best(runs, () => encoder.encode(Float32Array.from(mel), T));
    const D = config.backbone.hidden;
    const rows = new Float32Array(chunk * D).map((_, i) => Math.sin(i * 0.01) * 0.1);
    const prefillS = best(runs, () => {
      state.reset();
      for (let i = 0; i < 4; i++) prefill.forward(state, rows, chunk);
    });
    const row = new Float32Array(D);
    const logits = new Float32Array(config.backbone.vocab);
    const steps = quick ? 20 : 100;
    const decodeS = best(runs, () => {
      state.reset();
      for (let i = 0; i < steps; i++) step.forward(state, row, 1);
    });
    const decodeLogitsS = best(runs, () => {
      state.reset();
      for (let i = 0; i < steps; i++) step.logits(step.forward(state, row, 1), logits);
    });
    const sampler = new Sampler(1);
    const codes = new Int32Array(8);
    const hidden = row.map((_, i) => Math.cos(i));
    const frames = quick ? 10 : 40;
    const depthS = best(runs, () => {
      for (let i = 0; i < frames; i++) depth.frame(hidden, sampler, AUDIO_SAMPLING, codes);
    });
    const out = new Float32Array(detok.maxSamples(detState));
    const detS = best(runs, () => {
      detState.startTurn();
      for (let i = 0; i < frames; i++) detok.frame(detState, codes, out, 0);
    });
    const stepMs = (decodeS / steps) * 1000;
    const textMs = (decodeLogitsS / steps) * 1000;
    const depthMs = (depthS / frames) * 1000;
    const detMs = (detS / frames) * 1000;
    const frameMs = stepMs + depthMs + detMs + (config.interleave.text / config.interleave.audio) * textMs;
    return {
      config: name,
      parameters: `${((report.weightBytes / 4) / 1e6).toFixed(1)} M`,
      encoderMsPerSecondOfAudio: round((encS / seconds) * 1000, 2),
      prefillTokensPerSecond: round((4 * chunk) / prefillS, 0),
      decodeTokensPerSecond: round(steps / decodeS, 0),
      decodeWithLogitsTokensPerSecond: round(steps / decodeLogitsS, 0),
      depthformerMsPerFrame: round(depthMs, 3),
      detokenizerMsPerFrame: round(detMs, 3),
      frameMs: round(frameMs, 3),
      realTimeFactor: round(frameMs / 80, 4),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface ModelBenchResult {
  bench: 'model';
  rows: ModelBenchRow[];
  notMeasured: string;
}

export async function run(options: { quick?: boolean } = {}): Promise<ModelBenchResult> {
  const names = options.quick === true ? ['tiny'] : ['tiny', 'small'];
  return {
    bench: 'model',
    rows: names.map((n) => measure(n, options.quick === true)),
    notMeasured: 'lfm2-audio-1.5b (q4/q8): needs a 1.5 B-parameter synthetic checkpoint; not run here',
  };
}

export function format(r: ModelBenchResult): string {
  const lines = ['model stages, one thread (f32 synthetic weights; a generated 80 ms frame = step + Depthformer + detokenizer + 6/12 of a text step):'];
  for (const m of r.rows) {
    lines.push(
      `  ${m.config} (${m.parameters} weights): encoder ${m.encoderMsPerSecondOfAudio} ms per s of audio; prefill ${m.prefillTokensPerSecond} tok/s; decode ${m.decodeTokensPerSecond} tok/s (${m.decodeWithLogitsTokensPerSecond} with the text head)`,
      `      Depthformer ${m.depthformerMsPerFrame} ms/frame, detokenizer ${m.detokenizerMsPerFrame} ms/frame → ${m.frameMs} ms per 80 ms frame (real-time factor ${m.realTimeFactor})`,
    );
  }
  lines.push(`  not measured: ${r.notMeasured}`);
  return lines.join('\n');
}
