// Long runs of the real command (system tier): a 15-minute reply under a 4 GiB address space.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-long-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 1, out: model, dtype: 'f32' });
// The test runner's module hooks stay out of the limited process: they reserve address space of their own.
const env = Object.fromEntries(Object.entries({ ...process.env, VOXSLAB_CACHE: join(work, 'cache') }).filter(([k]) => k !== 'NODE_OPTIONS'));

t.test('a long reply under a 4 GiB address space runs to its end (stage isolates reserve little)', async (t) => {
  const out = join(work, 'long.wav');
  const args = ['run', '--model', model, '--in', fixture, '--out', out, '--seed', '4', '--reply', '900'];
  const r = spawnSync('bash', ['-c', 'ulimit -v 4194304 && exec "$0" "$@"', process.execPath, cli, ...args], {
    encoding: 'utf8',
    timeout: 180_000,
    cwd: work,
    env: { ...env, VOXSLAB_MEMORY_LIMIT: '1GiB' },
  });
  t.equal(r.status, 0, r.stderr.slice(0, 400));
  const m = /long\.wav: ([\d.]+) s at 48000 Hz, 11250 audio frames, \d+ text tokens, stop: length/.exec(r.stderr);
  t.ok(m, 'the whole reply: 15 minutes of frames');
  t.equal(readFileSync(out).length, 46 + Math.round(Number(m?.[1]) * 48000) * 4, 'every sample written');
});
