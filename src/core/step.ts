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
 * of several `rows` also runs `Dialogue.stepRows` for that many conversations at once.
 */
export interface StepSlot {
  backbone: Backbone;
  depthformer: Depthformer;
  rows: number;
  logits: Float32Array; // [rows][vocab] text logits of a step (row 0: a one-conversation step's)
  /** Views made once: row r of `logits`, and the backbone's hidden plane from row r on. */
  logitsRows: readonly Float32Array[];
  hiddenFrom: readonly Float32Array[];
  logitsScratch: Float32Array; // int8 activations of the text head, per row
  audioLogits: Float32Array; // [codebooks][codes] Depthformer logits of a frame (inspection)
}

/**
 * Carves a step slot's stage workspaces from `work` (ticket) and its tables from `derived`
 * (model); `rows` sizes the heads' planes and the frame caches for a several-row step (at most
 * the prefill chunk: the backbone's row planes).
 */
export function buildStepSlot(
  c: ModelConfig,
  image: WeightsImage,
  work: Arena,
  derived: Workspace,
  o: { chunk: number; context: number; planner: Planner; rows?: number },
): StepSlot {
  const rows = Math.min(o.rows ?? 1, o.chunk);
  const backbone = new Backbone(c, image, work, derived, { chunk: o.chunk, context: o.context, planner: o.planner });
  const depthKv = work.carve('depth_kv', 'workspace.depthformer', Float32Array, rows * depthformerStateFloats(c));
  const depthformer = new Depthformer(c, image, work, derived, depthKv, o.planner, rows);
  const V = c.backbone.vocab;
  const D = c.backbone.hidden;
  const logits = work.carve('text.logits', 'workspace.sampler', Float32Array, rows * V);
  const hidden = backbone.stack.hiddenRows;
  return {
    backbone,
    depthformer,
    rows,
    logits,
    logitsRows: Array.from({ length: rows }, (_, r) => logits.subarray(r * V, (r + 1) * V)),
    hiddenFrom: Array.from({ length: rows }, (_, r) => hidden.subarray(r * D)),
    logitsScratch: work.carve('text.scratch', 'workspace.sampler', Float32Array, rows * gemvScratchFloats(c.backbone.hidden)),
    audioLogits: work.carve('audio.logits', 'workspace.depthformer', Float32Array, c.audio.codebooks * c.audio.codes),
  };
}
