/**
 * The pipeline's stages, in order: every derived table (doorbells, rings, control block,
 * placement, categories) comes from this list through `Topology`.
 */
import { Topology, type StageSpec } from '../topology.js';
import { stage as capture } from './capture.js';
import { stage as frontend } from './frontend.js';
import { stage as conformer } from './conformer.js';
import { stage as depthformer } from './depthformer.js';
import { stage as playback } from './playback.js';

export const PIPELINE_STAGES: readonly StageSpec[] = Object.freeze([capture, frontend, conformer, depthformer, playback]);

/** The five-stage pipeline's shape. */
export const PIPELINE = new Topology(PIPELINE_STAGES);

export { inputChunk } from './capture.js';
