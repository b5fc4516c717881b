// `bench model --peer` as a developer runs it, on a tiny checkpoint given with --model (system
// tier: node-llama-cpp in child processes). Every peer row names the engine and the CPU build
// that ran and carries every sample; the peer runs alone: while it runs, voxslab's process uses
// next to none of a CPU, and the same measure sees a thread spinning beside it (the control).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ModelBenchResult } from '../../bench/model.js';
import { besideCpu, peerChildSample } from '../../bench/peer.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const dir = join(scratchDir('voxslab-peer-'), 'tiny');
makeCheckpoint({ config: 'tiny', seed: 5, out: dir, dtype: 'f32' });

t.test('bench model --peer: rows name the peer and keep every sample; nothing of voxslab runs beside the peer', async (t) => {
  const r = spawnSync(process.execPath, [cli, 'bench', 'model', '--quick', '--peer', '--model', dir, '--json'], { encoding: 'utf8', timeout: 600_000 });
  t.equal(r.status, 0, r.status === 0 ? 'bench model --peer ran' : r.stderr.slice(-800));
  const out = JSON.parse(r.stdout) as ModelBenchResult;
  t.same(
    out.peer.map((p) => [p.checkpoint, p.threads]),
    [
      [dir, 1],
      [dir, 2],
    ],
    'the checkpoint against the peer at one and two threads',
  );
  for (const p of out.peer) {
    t.equal(p.peerEngine, 'node-llama-cpp', 'the fallback peer ran');
    t.match(p.peerVariant, /\S/, `its CPU build is named: ${p.peerVariant.slice(0, 80)}`);
    const s = p.samplesTokensPerSecond;
    t.same([s.voxslabPrefill.length, s.peerPrefill.length, s.voxslabDecode.length, s.peerDecode.length], [2, 2, 2, 2], 'every sample is kept');
    t.equal(p.peerPrefill.min, Math.min(...s.peerPrefill), 'the spread is of those samples');
    t.ok(p.prefillRatio > 0 && p.decodeRatio > 0, 'ratios of the medians');
    for (const [k, v] of Object.entries(p.peerOrder)) t.ok(Number.isFinite(v) && v > 0, `the peer ${k} over its median: ×${v}`);
    t.ok(p.besideCpu < 0.1, `voxslab's CPU while the peer ran: ${p.besideCpu} of its wall time`);
  }
});

t.test('the measure of what runs beside the peer sees a spinning thread (the control)', async (t) => {
  const gguf = join(dir, 'backbone.f32.gguf');
  const quiet = besideCpu(() => peerChildSample(gguf, 1, 32, 4));
  t.ok(quiet.result.prefillTokensPerSecond > 0, 'a peer sample');
  const spin = new Worker('const end = Date.now() + 60_000; while (Date.now() < end);', { eval: true });
  t.teardown(() => spin.terminate());
  await new Promise((resolve) => spin.once('online', resolve));
  const busy = besideCpu(() => peerChildSample(gguf, 1, 32, 4));
  t.ok(quiet.cpuMs / quiet.wallMs < 0.1, `alone: ${(quiet.cpuMs / quiet.wallMs).toFixed(3)} of a CPU beside the peer`);
  t.ok(busy.cpuMs / busy.wallMs > 0.5, `a thread spinning: ${(busy.cpuMs / busy.wallMs).toFixed(3)} of a CPU beside the peer`);
});
