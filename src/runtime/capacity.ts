/**
 * Compute admission: how many conversations one engine keeps in real time, from a calibration
 * its stage workers run before readiness on a conversation opened for it (and closed after).
 *
 * What it counts is a generated frame with every conversation replying at once: the
 * Depthformer stage's batched step (each weight block read once for all of them, up to a
 * slot's rows; more conversations take more calls) and the playback stage's detokenizer, batched
 * the same way. The stages are added, not overlapped, and a frame may take
 * `HEADROOM` of its period: turns' encoding and prefill, the light stages and the machine's
 * other work take from the same CPUs.
 *
 * Thread contract: the main thread.
 */
import { InternalError } from '../errors.js';
import { framePeriodMs } from '../core/frames.js';
import { STEP_BATCH } from '../model/blocks/backbone.js';
import type { Pipeline } from './coordinator.js';

/** The share of a frame's period a frame of every open conversation may take. */
export const HEADROOM = 0.8;

/** An engine's compute capacity and what it was found from. */
export interface ComputeCapacity {
  /** Conversations admitted at once (at least one: a machine too slow for one still serves one). */
  conversations: number;
  /** True when the calibration found it; false when the `capacity` option gave it. */
  measured: boolean;
  /** Milliseconds of audio one frame carries. */
  periodMs: number;
  /** Calibration: conversations replying at once, and one frame of all of them in milliseconds (empty when given). */
  rows: number[];
  frameMs: number[];
}

/**
 * The predicted milliseconds of one frame of `n` conversations replying at once: full calls of
 * the widest measured row count, then the rest, read off the measured points linearly.
 */
export function frameCostMs(c: Pick<ComputeCapacity, 'rows' | 'frameMs'>, n: number): number {
  const { rows, frameMs } = c;
  if (rows.length === 0 || n <= 0) return 0;
  const wide = rows.length - 1;
  const full = Math.floor(n / rows[wide]!);
  const rest = n - full * rows[wide]!;
  let ms = full * frameMs[wide]!;
  if (rest > 0) {
    let i = 0;
    while (rows[i]! < rest) i++;
    if (rows[i] === rest || i === 0) ms += frameMs[i]! * (i === 0 ? rest / rows[0]! : 1);
    else {
      const f = (rest - rows[i - 1]!) / (rows[i]! - rows[i - 1]!);
      ms += frameMs[i - 1]! + f * (frameMs[i]! - frameMs[i - 1]!);
    }
  }
  return ms;
}

/** The most conversations (≤ `most`) whose frame fits `HEADROOM` of the period, at least one. */
export function capacityFrom(c: Pick<ComputeCapacity, 'rows' | 'frameMs' | 'periodMs'>, most: number): number {
  let n = 1;
  while (n < most && frameCostMs(c, n + 1) <= HEADROOM * c.periodMs) n++;
  return n;
}

/** Row counts the calibration times: powers of two up to a batched step's rows. */
function calibrationRows(most: number): number[] {
  const rows: number[] = [];
  for (let m = 1; m < most; m *= 2) rows.push(m);
  rows.push(most);
  return rows;
}

/**
 * Times a frame of 1, 2, 4, … conversations in every stage a frame passes through, on a
 * conversation opened for it and closed after (so its bytes must fit under the cap once).
 * Before readiness, with no conversation open.
 */
export async function calibrate(p: Pipeline): Promise<ComputeCapacity> {
  if (p.conversations.size > 0) throw new InternalError('calibration needs a pipeline with no conversation open');
  const periodMs = framePeriodMs(p.config);
  const rows = calibrationRows(Math.min(STEP_BATCH, p.setup.options.prefillChunk));
  const conv = await p.open({ seed: 1, inputRate: 16000 });
  const frameMs = rows.map(() => 0);
  try {
    for (const w of p.workers) {
      const ms = await w.call('calibrate', conv.index, rows);
      ms.forEach((v, i) => {
        frameMs[i] = frameMs[i]! + v;
      });
    }
  } finally {
    await p.closeConversation(conv);
  }
  const c = { measured: true, periodMs, rows, frameMs };
  return { conversations: capacityFrom(c, p.maxConversations), ...c };
}

/** A capacity the application gives (the `capacity` option): nothing measured. */
export function givenCapacity(p: Pipeline, conversations: number): ComputeCapacity {
  return { conversations, measured: false, periodMs: framePeriodMs(p.config), rows: [], frameMs: [] };
}
