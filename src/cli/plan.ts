import { totalmem } from 'node:os';
import { ArgumentError, UsageError } from '../errors.js';
import { flagValue, parseFlag, type OptionKey } from '../options.js';
import { limitFromEnvironment } from '../memory/limit.js';

import { type MemoryPlanOptions, planManifest, planMemory } from '../model/plan/memory.js';
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
] as const satisfies readonly (OptionKey & keyof MemoryPlanOptions)[];

export interface PlanConfigArgs {
  config: string;
  /** Flag texts by option key. */
  values: Partial<Record<(typeof PLAN_KEYS)[number], string>>;
  json: boolean;
}

/** `voxslab plan --config <name|file> [--conversations N] [--context T] [--segment S] [--kv f32|f16] [--slots N] [--json]` */
export function planConfig(a: PlanConfigArgs): string {
  const config = loadConfig(a.config);
  const options: Record<string, number | string> = {};
  const limits = { maxContext: config.backbone.maxContext };
  for (const k of PLAN_KEYS) {
    const v = parseFlag(k, a.values[k], limits);
    if (v !== undefined) options[k] = v;
  }
  let mp: ReturnType<typeof planMemory>;
  try {
    mp = planMemory(config, options as MemoryPlanOptions);
  } catch (e) {
    if (e instanceof ArgumentError) throw new UsageError(e.message, { cause: e });
    throw e;
  }
  const limit = limitFromEnvironment(totalmem());
  const manifest = planManifest(mp, limit);
  if (a.json) return JSON.stringify(manifest, null, 2);

  const o = mp.options;
  const lines: string[] = [];
  lines.push(
    `${config.name}: ${o.conversations} conversation(s), context ${o.context}, segment ${o.segmentSeconds} s, KV ${o.kv}, ${o.slots} pass slot(s)`,
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
  lines.push('', `${'stage plan'.padEnd(30)}${'high-water'.padStart(14)}${'lower bound'.padStart(14)}${'ratio'.padStart(8)}${'carved'.padStart(14)}`);
  for (const s of mp.stages) {
    const p = s.plan;
    lines.push(
      s.stage.padEnd(30) +
        formatBytes(p.highWater).padStart(14) +
        formatBytes(p.lowerBound).padStart(14) +
        p.ratio.toFixed(3).padStart(8) +
        formatBytes(p.highWater).padStart(14),
    );
  }
  lines.push('', `conformer high-water by tiling (${o.segmentSeconds} s segment; only the default is carved):`);
  for (const v of encoderTilingReport(config, o.segmentSeconds)) {
    lines.push(`  ${v.variant.padEnd(32)}${formatBytes(v.highWater).padStart(12)}`);
  }
  const t = manifest.totals;
  lines.push(
    '',
    `total ${formatBytes(t.current)} (${t.current} bytes) against a limit of ${formatBytes(limit)}${t.current > limit ? ' — EXCEEDS THE LIMIT' : ''}`,
    `not yet planned: ${(manifest.pending ?? []).join('; ')}`,
  );
  return lines.join('\n');
}
