/** The memory categories the model layer owns: one per stage workspace (memory/layout.ts). */
import { registerCategories } from '../memory/layout.js';

export const MODEL_CATEGORIES = [
  'workspace.frontend',
  'workspace.conformer',
  'workspace.prefill',
  'workspace.depthformer',
  'workspace.sampler',
  'workspace.detokenizer',
] as const;
export type ModelCategory = (typeof MODEL_CATEGORIES)[number];

registerCategories(MODEL_CATEGORIES);
