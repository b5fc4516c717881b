/** The memory categories the pipeline owns: audio rings and their records (memory/layout.ts). */
import { registerCategories } from '../memory/layout.js';
import '../model/categories.js';

export const PIPELINE_CATEGORIES = ['capture', 'playback.payload', 'playback.metadata', 'native.audio'] as const;
export type PipelineCategory = (typeof PIPELINE_CATEGORIES)[number];

registerCategories(PIPELINE_CATEGORIES);
