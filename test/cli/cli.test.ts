import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000 });

t.test('bench memory --json prints one JSON document', async (t) => {
  const r = voxslab('bench', 'memory', '--json', '--quick');
  t.equal(r.status, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { bench: string; oneThread: { commitCycleNs: number }; snapshots: { owners: number }[] };
  t.equal(doc.bench, 'memory');
  t.ok(doc.oneThread.commitCycleNs > 0);
  t.same(doc.snapshots.map((s) => s.owners), [1, 4, 16, 64]);
});

t.test('usage errors exit 2 with a message', async (t) => {
  for (const args of [['frobnicate'], ['bench'], ['bench', 'nope'], ['bench', 'memory', '--bogus'], []]) {
    const r = voxslab(...args);
    t.equal(r.status, 2, `voxslab ${args.join(' ')} exits 2`);
    t.ok(r.stderr.length > 0 || r.stdout.includes('usage'), 'and says why');
  }
  const ok = voxslab('help');
  t.equal(ok.status, 0);
  t.match(ok.stdout, /bench memory/);
  t.match(voxslab('version').stdout, /^\d+\.\d+\.\d+\n$/);
});

t.test('a bad VOXSLAB_MEMORY_LIMIT is bad input (exit 4)', async (t) => {
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', `
    import { MemoryDomain, exitCodeOf } from ${JSON.stringify(new URL('../../src/index.js', import.meta.url).href)};
    try { MemoryDomain.create(); } catch (e) { console.error(e.message); process.exit(exitCodeOf(e)); }`], {
    encoding: 'utf8',
    env: { ...process.env, VOXSLAB_MEMORY_LIMIT: 'plenty' },
  });
  t.equal(r.status, 4);
  t.match(r.stderr, /VOXSLAB_MEMORY_LIMIT.*'plenty' is not a size/);
});
