import { totalmem } from 'node:os';
import { ArgumentError, UsageError } from '../errors.js';
import { flagValue, parseFlag } from '../options.js';
import { limitFromEnvironment } from '../memory/limit.js';

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { MemoryManifest } from '../memory/manifest.js';
import { type PipelinePlan, type PipelinePlanOptions, type PlanSource, planPipeline } from '../runtime/plan.js';
import { encoderTilingReport } from '../model/plan/plans.js';
import { parseIntervalsCsv } from '../memory/intervals.js';
import { plan } from '../memory/planner.js';
import { formatBytes } from '../memory/sizes.js';
import { loadConfig } from '../io/config.js';
import { readTextFile } from '../io/files.js';

/** `voxslab plan --intervals FILE.csv [--align N] [--json]` */
export function planIntervals(file: string, align: string | undefined, json: boolean): string {
  const alignment = flagValue<number>('align', align);
  const specs = parseIntervalsCsv(readTextFile(file, 'interval CSV'), file);
  const p = plan(specs, { alignment });
  if (json) {
    const offsets: Record<string, number> = {};
    for (const b of p.buffers) offsets[b.name] = b.offset;
    return JSON.stringify(
      {
        file,
        buffers: p.buffers.length,
        alignment,
        highWater: p.highWater,
        lowerBound: p.lowerBound,
        ratio: p.ratio,
        greedyHighWater: p.greedyHighWater,
        planMs: p.planMs,
        offsets,
      },
      null,
      2,
    );
  }
  return [
    `${file}: ${p.buffers.length} buffers, alignment ${alignment}`,
    `  high-water   ${p.highWater} bytes (${formatBytes(p.highWater)})`,
    `  lower bound  ${p.lowerBound} bytes (${formatBytes(p.lowerBound)})`,
    `  ratio        ${p.ratio.toFixed(4)}   (greedy by size alone: ${(p.greedyHighWater / Math.max(1, p.lowerBound)).toFixed(4)})`,
    `  plan time    ${p.planMs.toFixed(2)} ms`,
  ].join('\n');
}

export { PLAN_KEYS } from './plan-keys.js';
import { PLAN_KEYS } from './plan-keys.js';

export interface PlanConfigArgs {
  config: string;
  /** Flag texts by option key. */
  values: Partial<Record<(typeof PLAN_KEYS)[number], string>>;
  json: boolean;
}

/** A checkpoint folder is planned from its own files' headers and tokenizer; anything else is a configuration. */
function planSource(config: string, dtype: string | undefined): PlanSource {
  if (existsSync(join(config, 'model.safetensors'))) {
    if (dtype !== undefined)
      throw new UsageError(`plan: --dtype is for a configuration; '${config}' is a checkpoint and its files say how its weights are stored`);
    return { dir: config };
  }
  const d = flagValue<string>('dtype', dtype);
  if (d !== 'f32' && d !== 'f16' && d !== 'bf16')
    throw new UsageError(`plan: --dtype ${d} is planned from a quantized checkpoint folder (voxslab quantize), not a configuration`);
  return { config: loadConfig(config), dtype: d };
}

/** The `voxslab.memory/v1` manifest of a plan, with its configuration and the cap it is read against. */
export function planDocument(p: PipelinePlan, limit: number): MemoryManifest & { configuration: Record<string, unknown> } {
  const { schema, ...rest } = p.manifest;
  return { schema, configuration: { name: p.config.name, ...p.options }, ...rest, totals: { ...rest.totals, limit } };
}

/**
 * `voxslab plan --config <name|file|checkpoint> [options] [--json]`: the pipeline's manifest,
 * found by running its own constructors over a planning domain (src/pipeline/plan.ts).
 */
export function planConfig(a: PlanConfigArgs): string {
  const source = planSource(a.config, a.values.dtype);
  const config = 'dir' in source ? loadConfig(source.dir) : source.config;
  const options: Record<string, number | string> = {};
  const limits = { maxContext: config.backbone.maxContext };
  for (const k of PLAN_KEYS) {
    if (k === 'dtype') continue;
    const v = parseFlag(k, a.values[k], limits);
    if (v !== undefined) options[k] = v;
  }
  let p: PipelinePlan;
  try {
    p = planPipeline(source, options as PipelinePlanOptions);
  } catch (e) {
    if (e instanceof ArgumentError) throw new UsageError(e.message, { cause: e });
    throw e;
  }
  const limit = limitFromEnvironment(totalmem());
  const manifest = planDocument(p, limit);
  if (a.json) return JSON.stringify(manifest, null, 2);

  const o = p.options as Record<string, unknown>;
  const lines: string[] = [];
  lines.push(
    `${config.name}: ${o.conversations} conversation(s) at ${o.inputRate} Hz in, context ${o.context}, segment ${o.segmentSeconds} s, ` +
      `reply ${o.replySeconds} s, KV ${o.kv}, ${o.slots} pass slot(s)`,
    `weights: ${(o.weights as { main: string }).main}`,
    '',
    `${'owner'.padEnd(16)}${'category'.padEnd(24)}${'requested'.padStart(14)}${'footprint'.padStart(14)}${'regions'.padStart(9)}`,
  );
  for (const [name, owner] of Object.entries(manifest.owners)) {
    for (const [cat, u] of Object.entries(owner.categories)) {
      lines.push(
        `${name.padEnd(16)}${cat.padEnd(24)}${formatBytes(u.requested).padStart(14)}${formatBytes(u.footprint).padStart(14)}${String(u.regions).padStart(9)}`,
      );
    }
    const borrowed = owner.borrowers.length > 0 ? `  (shared with ${owner.borrowers.join(', ')}; charged once here)` : '';
    lines.push(`${''.padEnd(16)}${'held'.padEnd(24)}${''.padStart(14)}${formatBytes(owner.held).padStart(14)}${borrowed}`);
  }
  const segment = o.segmentSeconds as number;
  lines.push('', `conformer high-water by tiling (${segment} s segment; only the default is carved):`);
  for (const v of encoderTilingReport(config, segment)) {
    lines.push(`  ${v.variant.padEnd(32)}${formatBytes(v.highWater).padStart(12)}`);
  }
  const t = manifest.totals;
  lines.push(
    '',
    `total ${formatBytes(t.current)} (${t.current} bytes) against a limit of ${formatBytes(limit)}${t.current > limit ? ' — EXCEEDS THE LIMIT' : ''}`,
    'the same bytes `voxslab run` carves for these options: every constructor ran over a planning domain, nothing was allocated',
  );
  return lines.join('\n');
}
