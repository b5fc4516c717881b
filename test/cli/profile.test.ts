import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { summarize } from '../../bench/profile.js';
import { scratchDir } from '../helpers.js';

const profile = fileURLToPath(new URL('../../bench/profile.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));

t.test("a thread's self time per function, from its samples and the gaps between them", async (t) => {
  const frame = (functionName: string, url = '', lineNumber = -1) => ({ functionName, url, lineNumber });
  const s = summarize('x.cpuprofile', {
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 3, 4, 5] },
      { id: 2, callFrame: frame('hot', 'file:///p/dist/src/a.js', 9) },
      { id: 3, callFrame: frame('(idle)') },
      { id: 4, callFrame: frame('(garbage collector)') },
      { id: 5, callFrame: frame('', 'file:///p/dist/workers/conformer.js', 0) },
    ],
    startTime: 0,
    endTime: 12_000,
    // Sample i lasts until sample i + 1: hot 1 ms + 1 ms, idle 5 ms, GC 2 ms, the entry 3 ms.
    samples: [2, 2, 3, 4, 5, 2],
    timeDeltas: [0, 1000, 1000, 5000, 2000, 3000],
  });
  t.equal(s.thread, 'thread ? (conformer)', 'named by its entry script');
  t.equal(summarize('CPU.20261202.043213.23512.0.001.cpuprofile', { nodes: [], startTime: 0, endTime: 0 }).thread, 'main', 'thread 0 is main');
  t.equal(s.wallMs, 12);
  t.equal(s.busyMs, 5, 'busy: everything but idle and GC');
  t.equal(s.gcMs, 2);
  t.same(s.top, [
    { fn: '(anonymous) dist/workers/conformer.js:1', ms: 3 },
    { fn: 'hot dist/src/a.js:10', ms: 2 },
  ]);
});

t.test('npm run profile: one CPU profile per thread, the five pinned workers included', async (t) => {
  const dir = scratchDir('voxslab-profile-');
  const env: NodeJS.ProcessEnv = { ...process.env, VOXSLAB_PROFILE_DIR: join(dir, 'profiles') };
  delete env.NODE_OPTIONS;
  const r = spawnSync(process.execPath, [profile, 'run', '--model', 'tiny', '--in', fixture, '--out', join(dir, 'reply.wav')], {
    encoding: 'utf8',
    timeout: 180_000,
    env,
  });
  t.equal(r.status, 0, 'the profiled run succeeds', { stderr: r.stderr.slice(-2000) });
  const files = readdirSync(join(dir, 'profiles')).filter((f) => f.endsWith('.cpuprofile'));
  t.ok(files.length >= 6, `${files.length} profiles: the main thread and every worker`);
  t.match(r.stderr, /\nmain \(CPU\.[\d.]+\.cpuprofile\)/, 'the main thread summarized');
  t.equal((r.stderr.match(/\nthread \d+ (\([a-z]+\) )?\(CPU\./g) ?? []).length, files.length - 1, 'and every worker');
  t.match(r.stderr, /ms busy in JavaScript and native calls/);
  const usage = spawnSync(process.execPath, [profile], { encoding: 'utf8', env });
  t.equal(usage.status, 2, 'no command: usage, exit 2');
});
