// Each stage's poll — the code its worker runs after readiness — driven through real rings in a
// worker thread of its own (one stage per thread, as in the pipeline): once V8 has optimised
// it, a record in and its records out leave nothing on the JS heap and no ArrayBuffer behind.
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { STAGE_NAMES } from '../../src/pipeline/protocol.js';
import { runWorker } from '../helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'voxslab-stages-'));
makeCheckpoint({ config: 'tiny', seed: 61, out: dir, dtype: 'f32' });
const probe = new URL('./workers/stage-probe.js', import.meta.url);

for (const stage of STAGE_NAMES) {
  t.test(`${stage}: a record through its poll allocates nothing in steady state`, async (t) => {
    const p = await runWorker<{ heap: number; arrayBuffers: number; windows: number; records: number }>(probe, { dir, stage });
    t.ok(p.heap >= 0 && p.heap < 1024, `JS heap growth over a window: ${p.heap} bytes (window ${p.windows}; the probe's own reads are ~600)`);
    t.ok(p.arrayBuffers <= 0, `no ArrayBuffer growth (${p.arrayBuffers} bytes)`);
    t.ok(p.records > 0, `${p.records} records handled`);
  });
}
