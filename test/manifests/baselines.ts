// The frozen manifest baselines: which configurations and options, and how each is made.
// Regenerate after an intentional change with `npm run manifests:update` and commit the result.

import { planDocument } from '../../src/cli/plan.js';
import { FootprintPolicy, type MemoryManifest } from '../../src/memory/index.js';
import type { FloatDtype } from '../../src/io/checkpoint.js';
import { loadConfig } from '../../src/io/config.js';
import { type PipelinePlanOptions, planPipeline } from '../../src/runtime/plan.js';

/** The built-in checkpoints are f32; a real LFM2.5-Audio-1.5B checkpoint stores bf16. */
export const BASELINES: Record<string, { config: string; dtype: FloatDtype; options: PipelinePlanOptions }> = {
  tiny: { config: 'tiny', dtype: 'f32', options: {} },
  small: { config: 'small', dtype: 'f32', options: {} },
  'lfm2-audio-1.5b': { config: 'lfm2-audio-1.5b', dtype: 'bf16', options: {} },
  'lfm2-audio-1.5b.full-context': { config: 'lfm2-audio-1.5b', dtype: 'bf16', options: { context: 128000 } },
  'lfm2-audio-1.5b.two-conversations.60s.f16': {
    config: 'lfm2-audio-1.5b',
    dtype: 'bf16',
    options: { conversations: 2, segmentSeconds: 60, kv: 'f16' },
  },
};

/** Fixed 4 KiB pages so baselines match on every machine. */
export const BASELINE_POLICY = new FootprintPolicy({ alignment: 64, pageSize: 4096 });

/** Baselines carry no machine-dependent limit, nor the thread count (by default the machine's CPUs). */
export function computeBaseline(name: string): MemoryManifest {
  const b = BASELINES[name];
  if (b === undefined) throw new Error(`no baseline '${name}'`);
  return planDocument(planPipeline({ config: loadConfig(b.config), dtype: b.dtype }, { threads: 1, ...b.options, policy: BASELINE_POLICY }), 0);
}
