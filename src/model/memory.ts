/**
 * The memory blueprint of a configuration: what every owner holds once conversations are
 * ready, built from the same stage plans the compute carves. `voxslab plan --config` prints
 * its manifest; nothing is allocated.
 */
import { type Blueprint, blueprintManifest, FootprintPolicy, type MemoryManifest, type RegionBlueprint } from '../memory/index.js';
import { ArgumentError } from '../memory/errors.js';
import type { ModelConfig } from './config.js';
import { DEFAULT_ENCODER_TILES, encoderDerived, frontendDerived, frontendState, planEncoder, planFrontend, type StagePlan } from './plans.js';

export interface MemoryPlanOptions {
  /** Simultaneous conversations. Default 1. */
  conversations?: number;
  /** Backbone context per conversation (KV cache rows). Default: the configuration's maximum. */
  context?: number;
  /** Longest user segment, seconds. Default 30. */
  segmentSeconds?: number;
  /** KV cache element type. Default f32. */
  kv?: 'f32' | 'f16';
  /** Pass (ticket) slots. Default 2. */
  slots?: number;
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
export const PENDING = Object.freeze([
  'model weights image',
  'backbone prefill and step workspace',
  'depthformer and sampler workspace',
  'detokenizer workspace',
  'capture and playback rings',
]);

function intIn(name: string, v: number, lo: number, hi: number): number {
  if (!Number.isSafeInteger(v) || v < lo || v > hi) throw new ArgumentError(`${name} must be an integer from ${lo} to ${hi}, got ${String(v)}`);
  return v;
}

/** Per-conversation persistent state (recurrence) regions. */
export function conversationState(config: ModelConfig, context: number, kvBytes: number): RegionBlueprint[] {
  const b = config.backbone;
  const attn = b.layers.filter((l) => l === 'attention').length;
  const conv = b.layers.length - attn;
  const df = config.depthformer;
  const dt = config.detokenizer;
  const dAttn = dt.layers.filter((l) => l === 'attention').length;
  const dConv = dt.layers.length - dAttn;
  return [
    // [attn layers][k|v][context][kv heads × head dim]
    { name: 'kv_cache', category: 'recurrence', bytes: attn * 2 * context * b.kvHeads * b.headDim * kvBytes },
    // [conv layers][2 columns of B⊙x][hidden]
    { name: 'conv_state', category: 'recurrence', bytes: conv * (b.convKernel - 1) * b.hidden * 4 },
    // [layers][k|v][codebooks][kv heads × head dim], reset every frame
    { name: 'depth_kv', category: 'recurrence', bytes: df.layers * 2 * config.audio.codebooks * df.kvHeads * df.headDim * 4 },
    // [attn layers][k|v][window][kv heads × head dim]
    { name: 'detok_kv', category: 'recurrence', bytes: dAttn * 2 * dt.window * dt.kvHeads * dt.headDim * 4 },
    { name: 'detok_conv', category: 'recurrence', bytes: dConv * (dt.convKernel - 1) * dt.hidden * 4 },
  ];
}

export function planMemory(config: ModelConfig, options: MemoryPlanOptions = {}): MemoryPlan {
  const o: Required<MemoryPlanOptions> = {
    conversations: intIn('conversations', options.conversations ?? 1, 1, 32),
    context: intIn('context', options.context ?? config.backbone.maxContext, 1, config.backbone.maxContext),
    segmentSeconds: options.segmentSeconds ?? 30,
    kv: options.kv ?? 'f32',
    slots: intIn('slots', options.slots ?? 2, 1, 16),
  };
  if (!(o.segmentSeconds > 0 && o.segmentSeconds <= 600)) throw new ArgumentError(`segment must be more than 0 and at most 600 seconds, got ${String(o.segmentSeconds)}`);
  if (o.kv !== 'f32' && o.kv !== 'f16') throw new ArgumentError(`kv must be f32 or f16, got '${String(o.kv)}'`);
  const frontend = planFrontend(config);
  const conformer = planEncoder(config, { segmentSeconds: o.segmentSeconds, tiles: DEFAULT_ENCODER_TILES });
  const reference = planEncoder(config, { segmentSeconds: o.segmentSeconds, tiles: false });
  const stages = [frontend, conformer];
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
        ...conversationState(config, o.context, o.kv === 'f16' ? 2 : 4),
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
