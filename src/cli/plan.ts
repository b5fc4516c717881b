import { readFileSync } from 'node:fs';
import { BadInputError, UsageError } from '../memory/errors.js';
import { parseIntervalsCsv } from '../memory/intervals.js';
import { plan } from '../memory/planner.js';
import { formatBytes } from '../memory/sizes.js';

export function readText(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code ?? 'error';
    throw new BadInputError({ file }, `cannot read the ${what} (${code})`, { cause });
  }
}

/** `voxslab plan --intervals FILE.csv [--align N] [--json]` */
export function planIntervals(file: string, align: string | undefined, json: boolean): string {
  let alignment = 1;
  if (align !== undefined) {
    alignment = Number(align);
    if (!/^\d+$/.test(align) || !Number.isSafeInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0 || alignment > 2 ** 30) {
      throw new UsageError(`--align must be a power of two from 1 to 2^30, got '${align}'`);
    }
  }
  const specs = parseIntervalsCsv(readText(file, 'interval CSV'), file);
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
