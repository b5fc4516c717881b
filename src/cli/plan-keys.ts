import type { OptionKey } from '../options.js';

/** The options of `voxslab plan --config`: every option that changes what is carved. */
export const PLAN_KEYS = [
  'conversations',
  'context',
  'segmentSeconds',
  'replySeconds',
  'kv',
  'slots',
  'prefillChunk',
  'outputRate',
  'inputRate',
  'dtype',
] as const satisfies readonly OptionKey[];
