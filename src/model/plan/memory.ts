/**
 * The memory blueprint of a configuration: what every owner holds once conversations are
 * ready, built from the same stage plans the compute carves. `voxslab plan --config` prints
 * its manifest; nothing is allocated.
 */
import { type Blueprint, blueprintManifest, FootprintPolicy, type MemoryManifest, type RegionBlueprint } from '../../memory/index.js';
import { optionValue } from '../../options.js';
import type { ModelConfig } from '../format/config.js';
import { DEFAULT_ENCODER_TILES, replyFrames, encoderDerived, frontendDerived, frontendState, planEncoder, planFrontend, type StagePlan } from './plans.js';
import { backboneDims, backboneStateSizes, detokenizerDims, lfm2Pass } from '../blocks/backbone.js';
import { depthformerPass, depthformerStateFloats } from '../blocks/depthformer.js';
import { DetokenizerState } from '../blocks/detokenizer.js';
import { gemvScratchFloats } from '../blocks/kernels.js';
import { measureWorkspace } from '../../dsp/workspace.js';
import { plan } from '../../memory/planner.js';
import '../categories.js';

/** Defaults and ranges: src/options.ts, the same the runtime resolves through. */
export interface MemoryPlanOptions {
  conversations?: number;
  context?: number;
  segmentSeconds?: number;
  kv?: 'f32' | 'f16';
  slots?: number;
  prefillChunk?: number;
  /** Longest reply audio per turn: the detokenizer's caches are planned for it. */
  replySeconds?: number;
  outputRate?: number;
}

export interface MemoryPlan {
  readonly config: ModelConfig;
  readonly options: Required<MemoryPlanOptions>;
  readonly stages: readonly StagePlan[];
  /** The untiled Conformer reference, planned for comparison only (never carved). */
  readonly reference: StagePlan;
  readonly blueprint: Blueprint;
}

/** Parts not yet described by stage plans; listed in the manifest so totals are not misread. */
export const PENDING = Object.freeze(['model weights image', 'capture and playback rings']);

/**
 * Per-conversation persistent state (recurrence) regions, sized by the same functions the
 * compute carves them with: backbone KV caches and short-conv columns, and the detokenizer's
 * sliding-window caches, ISTFT overlap and resampler.
 */
export function conversationState(config: ModelConfig, context: number, kvBytes: number, o: { replySeconds: number; outputRate: number }): RegionBlueprint[] {
  const out: RegionBlueprint[] = backboneStateSizes(config, context).map((r) => ({
    name: `backbone.${r.name}`,
    category: 'recurrence' as const,
    bytes: r.name.startsWith('kv.') ? (r.bytes / 4) * kvBytes : r.bytes,
  }));
  const turnPositions = replyFrames(config, o.replySeconds) * config.detokenizer.upsample;
  for (const [i, bytes] of DetokenizerState.lfmBytes(config, turnPositions).entries()) out.push({ name: `detok.${i}`, category: 'recurrence', bytes });
  // The ISTFT and resampler buffers, measured by building them.
  const m = measureWorkspace(new FootprintPolicy({ alignment: 1, pageSize: 4096 }));
  DetokenizerState.streams(config, m.workspace, o.outputRate);
  m.sizes.forEach((bytes, i) => {
    out.push({ name: `detok.stream.${i}`, category: 'recurrence', bytes });
  });
  return out;
}

export function planMemory(config: ModelConfig, options: MemoryPlanOptions = {}): MemoryPlan {
  const c = { maxContext: config.backbone.maxContext };
  const o: Required<MemoryPlanOptions> = {
    conversations: optionValue('conversations', options.conversations),
    context: optionValue('context', options.context, c),
    segmentSeconds: optionValue('segmentSeconds', options.segmentSeconds),
    kv: optionValue('kv', options.kv),
    slots: optionValue('slots', options.slots),
    prefillChunk: optionValue('prefillChunk', options.prefillChunk),
    replySeconds: optionValue('replySeconds', options.replySeconds),
    outputRate: optionValue('outputRate', options.outputRate),
  };
  const frontend = planFrontend(config);
  const conformer = planEncoder(config, { segmentSeconds: o.segmentSeconds, tiles: DEFAULT_ENCODER_TILES });
  const reference = planEncoder(config, { segmentSeconds: o.segmentSeconds, tiles: false });
  const det = config.detokenizer;
  const backbone: StagePlan = { stage: 'backbone', plan: plan(lfm2Pass(backboneDims(config), o.prefillChunk).build()), ops: [] };
  const depthformer: StagePlan = { stage: 'depthformer', plan: plan(depthformerPass(config).build()), ops: [] };
  const detokenizer: StagePlan = { stage: 'detokenizer', plan: plan(lfm2Pass(detokenizerDims(config), det.upsample).build()), ops: [] };
  const stages = [frontend, conformer, backbone, depthformer, detokenizer];
  const arenas: Blueprint['arenas'] = [
    {
      owner: { kind: 'model', index: 0 },
      name: 'derived',
      regions: [...frontendDerived(config), ...encoderDerived(config, o.segmentSeconds)].map((r) => ({ ...r, category: 'derived' as const })),
    },
  ];
  const conversations: string[] = [];
  for (let c = 0; c < o.conversations; c++) {
    conversations.push(`conversation/${c}`);
    arenas.push({
      owner: { kind: 'conversation', index: c },
      name: `conversation ${c} state`,
      regions: [
        ...conversationState(config, o.context, o.kv === 'f16' ? 2 : 4, o),
        ...frontendState(config, { segmentSeconds: o.segmentSeconds }).map((r) => ({ ...r, category: 'workspace.frontend' as const })),
      ],
    });
  }
  const passSlots: Record<string, number> = {};
  for (let t = 0; t < o.slots; t++) {
    passSlots[`ticket/${t}`] = 1;
    arenas.push({
      owner: { kind: 'ticket', index: t },
      name: `ticket ${t} scratch`,
      regions: [
        { name: 'frontend', category: 'workspace.frontend', bytes: frontend.plan.highWater },
        { name: 'conformer', category: 'workspace.conformer', bytes: conformer.plan.highWater },
        { name: 'backbone', category: 'workspace.prefill', bytes: backbone.plan.highWater },
        { name: 'depthformer', category: 'workspace.depthformer', bytes: depthformer.plan.highWater },
        // The Depthformer's 8-position cache, emptied every frame: pass scratch, not conversation state.
        { name: 'depth_kv', category: 'workspace.depthformer', bytes: depthformerStateFloats(config) * 4 },
        { name: 'detokenizer', category: 'workspace.detokenizer', bytes: detokenizer.plan.highWater },
        // The detokenizer's bins, one code frame of 24 kHz audio and the int8 rows of `lin`.
        { name: 'detokenizer.bins', category: 'workspace.detokenizer', bytes: det.upsample * det.outBins * 4 },
        { name: 'detokenizer.pcm24', category: 'workspace.detokenizer', bytes: (det.upsample * det.hop + det.nFft) * 4 },
        { name: 'detokenizer.scratch', category: 'workspace.detokenizer', bytes: det.upsample * gemvScratchFloats(det.hidden) * 4 },
      ],
    });
  }
  const plans: Record<string, { highWater: number; lowerBound: number; carved: number }> = {};
  for (const s of stages) plans[s.stage] = { highWater: s.plan.highWater, lowerBound: s.plan.lowerBound, carved: s.plan.highWater };
  return Object.freeze({
    config,
    options: o,
    stages,
    reference,
    blueprint: { arenas, borrowers: { 'model/0': conversations }, passSlots, plans },
  });
}

/** Sizing policy for planned manifests: fixed 4 KiB pages so baselines match on every machine. */
export const PLAN_POLICY = new FootprintPolicy({ alignment: 64, pageSize: 4096 });

/** The `voxslab.memory/v1` manifest of a memory plan (no allocation). */
export function planManifest(mp: MemoryPlan, limit: number, policy: FootprintPolicy = PLAN_POLICY): MemoryManifest {
  const { schema, ...rest } = blueprintManifest(mp.blueprint, policy, limit);
  return { schema, configuration: { name: mp.config.name, ...mp.options }, pending: [...PENDING], ...rest };
}
