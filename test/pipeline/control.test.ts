import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { load } from '../../src/index.js';

/** The main thread's heap after a full collection (gc exposed only after the workers exist, so theirs is not). */
function heap(): number {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
  return process.memoryUsage().heapUsed;
}

const dir = join(mkdtempSync(join(tmpdir(), 'voxslab-control-')), 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });

t.test('control calls leave nothing behind on the main thread (a long-lived daemon makes millions)', async (t) => {
  const engine = await load(dir, { memoryLimit: '1GiB' });
  t.teardown(() => engine.close());
  for (let i = 0; i < 200; i++) await engine.pipeline.stats();
  const before = heap();
  const calls = 2000;
  for (let i = 0; i < calls; i++) await engine.pipeline.stats();
  const grown = heap() - before;
  t.ok(grown < 256 * 1024, `${calls * 5} control calls grew the main thread's heap by ${grown} bytes (${(grown / (calls * 5)).toFixed(1)} per call)`);
});
