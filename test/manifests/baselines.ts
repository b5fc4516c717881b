// The frozen manifest baselines: which configurations and options, and how each is made.
// Regenerate after an intentional change with `npm run manifests:update` and commit the result.

import { type MemoryPlanOptions, planManifest, planMemory } from '../../src/model/plan/memory.js';
import type { MemoryManifest } from '../../src/memory/index.js';
import { loadConfig } from '../../src/io/config.js';

export const BASELINES: Record<string, { config: string; options: MemoryPlanOptions }> = {
  tiny: { config: 'tiny', options: {} },
  small: { config: 'small', options: {} },
  'lfm2-audio-1.5b': { config: 'lfm2-audio-1.5b', options: {} },
  'lfm2-audio-1.5b.full-context': { config: 'lfm2-audio-1.5b', options: { context: 128000 } },
  'lfm2-audio-1.5b.two-conversations.60s.f16': { config: 'lfm2-audio-1.5b', options: { conversations: 2, segmentSeconds: 60, kv: 'f16' } },
};

/** Baselines carry no machine-dependent limit. */
export function computeBaseline(name: string): MemoryManifest {
  const b = BASELINES[name];
  if (b === undefined) throw new Error(`no baseline '${name}'`);
  return planManifest(planMemory(loadConfig(b.config), b.options), 0);
}
