import t from 'tap';
import { join } from 'node:path';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { runWorker, scratchDir } from '../helpers.js';

const dir = join(scratchDir('voxslab-control-'), 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });

/** Heap samples (after full collections) between windows of `rounds` rounds of five control calls, clean and then keeping an object per round. */
async function probe(rounds: number, windows: number): Promise<{ clean: number[]; leaking: number[] }> {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  return runWorker(new URL('./workers/control-probe.js', import.meta.url), { dir, rounds, windows }, { execArgv: [], env });
}

/**
 * The median window's growth: something held per call grows every window, while the heap's
 * level after a full collection jumps by several hundred KB now and then, up or down, whatever
 * the calls do (V8's own bookkeeping). One such jump moves neither a clean run's median above
 * the bound nor a leaking run's below it.
 */
const leastGrowth = (w: number[]): number => [...w].sort((a, b) => a - b)[Math.floor(w.length / 2)]!;

t.test('control calls leave nothing behind on the main thread (a long-lived daemon makes millions)', async (t) => {
  const rounds = 1500;
  const calls = rounds * 5;
  const { clean, leaking } = await probe(rounds, 5);
  const grown = leastGrowth(clean);
  t.ok(
    grown < 256 * 1024,
    `${calls} control calls grew the main thread's heap by ${grown} bytes (${(grown / calls).toFixed(1)} per call; windows ${clean.join(', ')})`,
  );
  // The negative control: 32 numbers kept per round (about 60 bytes per call) are seen.
  const leaked = leastGrowth(leaking);
  t.ok(leaked >= 256 * 1024, `with 32 numbers kept per round the heap grows by ${leaked} bytes per window: the probe sees it`);
});
