/** A pass slot's backbone side: what one in-flight step of a dialogue computes in (ticket scratch). */
import type { Arena } from '../memory/arena.js';
import type { Workspace } from '../dsp/workspace.js';
import type { Planner } from '../memory/planner.js';
import type { ModelConfig } from '../model/format/config.js';
import type { WeightsImage } from '../model/format/image.js';
import { Backbone } from '../model/blocks/backbone.js';
import { Depthformer, depthformerStateFloats } from '../model/blocks/depthformer.js';
import { gemvScratchFloats } from '../model/blocks/kernels.js';
import './categories.js';

/**
 * One pass slot's backbone-side scratch: the staged rows, the hidden plane, the logits. A slot
 * of `rows` 2 can also run `Dialogue.stepPair`'s heads for two conversations.
 */
export interface StepSlot {
  backbone: Backbone;
  depthformer: Depthformer;
  rows: number;
  logits: Float32Array; // [rows][vocab] text logits of a step (row 0: this slot's)
  logitsRow1: Float32Array; // row 1 of `logits` (a view made once; empty for one row)
  logitsScratch: Float32Array; // int8 activations of the text head, per row
  audioLogits: Float32Array; // [codebooks][codes] Depthformer logits of a frame (inspection)
}

/**
 * Carves a step slot's stage workspaces from `work` (ticket) and its tables from `derived`
 * (model); `rows` 2 sizes the heads' planes for a pair step.
 */
export function buildStepSlot(
  c: ModelConfig,
  image: WeightsImage,
  work: Arena,
  derived: Workspace,
  o: { chunk: number; context: number; planner: Planner; rows?: number },
): StepSlot {
  const rows = o.rows ?? 1;
  const backbone = new Backbone(c, image, work, derived, { chunk: o.chunk, context: o.context, planner: o.planner });
  const depthKv = work.carve('depth_kv', 'workspace.depthformer', Float32Array, depthformerStateFloats(c));
  const depthformer = new Depthformer(c, image, work, derived, depthKv, o.planner, rows);
  const V = c.backbone.vocab;
  const logits = work.carve('text.logits', 'workspace.sampler', Float32Array, rows * V);
  return {
    backbone,
    depthformer,
    rows,
    logits,
    logitsRow1: logits.subarray(rows > 1 ? V : 0, rows > 1 ? 2 * V : 0),
    logitsScratch: work.carve('text.scratch', 'workspace.sampler', Float32Array, rows * gemvScratchFloats(c.backbone.hidden)),
    audioLogits: work.carve('audio.logits', 'workspace.depthformer', Float32Array, c.audio.codebooks * c.audio.codes),
  };
}
