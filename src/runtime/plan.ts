/**
 * The memory plan of a pipeline: what `Pipeline.start` and `open` would carve, found by running
 * the very same code — the weights image builder, the control block, each stage's constructor
 * and each conversation's open — on the main thread over a planning domain, whose slabs are
 * charged exactly as real ones but never allocated (MemoryDomain `unbacked`). Tensor data is
 * never read. Its manifest is the pipeline's, per owner and category, byte for byte.
 */
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';
import { FootprintPolicy } from '../memory/footprint.js';
import { MemoryDomain } from '../memory/domain.js';
import type { MemoryManifest } from '../memory/manifest.js';
import { optionValue } from '../options.js';
import { loadCheckpoint, plannedSources, type FloatDtype } from '../io/checkpoint.js';
import { loadConfig, loadTokenizer } from '../io/config.js';
import type { ModelConfig } from '../model/format/config.js';
import { buildWeightsImage, type WeightsImage } from '../model/format/image.js';
import { syntheticTokenizer, TextTokenizer } from '../model/format/tokenizer.js';
import { resolveSpeechOptions, speechSetup, type SpeechModelOptions } from '../core/conversation.js';
import { stageSettings } from './coordinator.js';
import { borrowModel, carveControl, carveRings, ledgerOwners } from './carve.js';
import type { StageInit } from './protocol.js';
import { Doorbells } from './ring.js';
import { PIPELINE } from './stages/index.js';

export interface PipelinePlanOptions extends SpeechModelOptions {
  /** Conversations open at once (default and range: src/options.ts). */
  conversations?: number;
  /** Pass slots per compute stage. */
  slots?: number;
  /** The sample rate conversations' input arrives at (their capture resamplers depend on it); a list gives each its own. */
  inputRate?: number | readonly number[];
  /** Each conversation's frontend finds the turns itself (VAD mode; the engine's `vad` option sets how). */
  findTurns?: boolean;
  /** Sizing policy; default this machine's (as a real pipeline's domain). */
  policy?: FootprintPolicy;
}

/** A checkpoint folder (its headers and tokenizer are read), or a configuration and a weight dtype. */
export type PlanSource = { dir: string } | { config: ModelConfig; dtype: FloatDtype };

export interface PipelinePlan {
  readonly config: ModelConfig;
  readonly options: Readonly<Record<string, unknown>>;
  readonly manifest: MemoryManifest;
}

export function planPipeline(source: PlanSource, options: PipelinePlanOptions = {}): PipelinePlan {
  const conversations = optionValue('conversations', options.conversations);
  const slots = optionValue('slots', options.slots);
  const rates = Array.isArray(options.inputRate) ? options.inputRate : Array.from({ length: conversations }, () => options.inputRate ?? 16000);
  if (rates.length !== conversations) throw new ArgumentError(`inputRate: ${rates.length} rates for ${conversations} conversation(s)`);
  for (const r of rates) optionValue('inputRate', r);
  const inputRate = rates.every((r) => r === rates[0]) ? rates[0] : rates;
  const findTurns = options.findTurns === true;
  const domain = MemoryDomain.create({
    limit: Number.MAX_SAFE_INTEGER,
    policy: options.policy ?? new FootprintPolicy(),
    unbacked: true,
    ownerCapacity: ledgerOwners(slots, conversations),
  });
  // Options are resolved (and refused) before anything is built.
  const config = 'dir' in source ? loadConfig(source.dir) : source.config;
  const resolved = resolveSpeechOptions(config, options);
  let tokenizer: TextTokenizer;
  let weights: { main: string; detokenizer: string };
  let image: WeightsImage;
  if ('dir' in source) {
    // The loader the pipeline uses: over a planning domain it reads headers only.
    tokenizer = loadTokenizer(source.dir, config.backbone.vocab);
    image = loadCheckpoint(source.dir, domain, false).image;
    weights = { main: join(source.dir, 'model.safetensors'), detokenizer: join(source.dir, 'audio_detokenizer', 'model.safetensors') };
  } else {
    const tk = syntheticTokenizer(config.backbone.vocab);
    tokenizer = new TextTokenizer(`${config.name} tokenizer (built-in)`, tk.tokenizer, tk.config, config.backbone.vocab);
    const planned = plannedSources(config, source.dtype);
    image = buildWeightsImage(domain, config, planned, false).image;
    weights = { main: planned.main.name, detokenizer: planned.detokenizer.name };
  }
  const setup = speechSetup(config, tokenizer, resolved);
  const { control } = carveControl(domain, PIPELINE.layout);
  const bells = new Doorbells(control);
  const settings = stageSettings(setup, config, slots);
  const stages = PIPELINE.stages.map((spec) => {
    // Only what a stage is built from; the worker-side fields (domain, image, pinning, test hooks) are not read.
    const init = {
      ...settings,
      stage: spec.name,
      bell: PIPELINE.bell(spec.name),
      layout: PIPELINE.layout,
      trapAllocations: false,
      exitAfterRecords: 0,
      failAllocationAt: 0,
      gateReplies: 0,
      replyFrameLimits: [],
      turnEndPauseMs: 0,
      firstFramePauseMs: 0,
      pin: [],
      threads: settings.options.threads,
    } as unknown as StageInit;
    return spec.create({ domain, image, init, bells });
  });
  const capacities = PIPELINE.capacities(config, setup.options.outputRate);
  for (let index = 0; index < conversations; index++) {
    carveRings(domain, index, capacities);
    for (const s of stages) s.open({ index, seed: 0, inputRate: rates[index] as number, vad: findTurns, echoDelayMs: -1, capacities });
    borrowModel(domain, index, true);
  }
  return Object.freeze({
    config,
    options: Object.freeze({
      weights,
      conversations,
      slots,
      inputRate,
      findTurns,
      ...setup.options,
    }),
    manifest: domain.manifest({ measureResident: false }),
  });
}
