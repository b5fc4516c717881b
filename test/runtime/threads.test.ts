import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { withoutModuleHooks } from '../../src/threads.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-threads-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 2, out: model, dtype: 'f32' });

t.test('module-hook flags are dropped in both forms; other options stay', async (t) => {
  t.same(
    withoutModuleHooks([
      '--import=a.mjs',
      '--enable-source-maps',
      '--require',
      'b.cjs',
      '-r',
      'c',
      '--loader=d',
      '--experimental-loader',
      'e',
      '--max-old-space-size=64',
    ]),
    ['--enable-source-maps', '--max-old-space-size=64'],
  );
  t.same(withoutModuleHooks(['--importer']), ['--importer'], 'a longer flag is not a hook flag');
});

// A host preload module that records every thread it runs on: with the stage workers started
// without host hooks, it runs on the main thread only.
t.test('a host --import hook (argument or NODE_OPTIONS) stays on the main thread; the stage workers start without it', async (t) => {
  const log = join(work, 'hook.log');
  const hook = join(work, 'hook.mjs');
  writeFileSync(
    hook,
    `import { appendFileSync } from 'node:fs';\nimport { threadId } from 'node:worker_threads';\nappendFileSync(${JSON.stringify(log)}, threadId + '\\n');\n`,
  );
  const env = { ...process.env, NODE_OPTIONS: `--import=${pathToFileURL(hook).href}` };
  const run = (args: string[], e: NodeJS.ProcessEnv) =>
    spawnSync(process.execPath, [...args, cli, 'run', '--model', model, '--in', fixture, '--out', join(work, 'r.wav'), '--reply', '1'], {
      encoding: 'utf8',
      env: e,
    });
  for (const [label, args, e] of [
    ['NODE_OPTIONS', [], env],
    ['--import', [`--import=${pathToFileURL(hook).href}`], process.env],
    // Process-wide flags beside a hook: a worker's own execArgv may not carry them.
    ['--import with V8 flags', ['--expose-gc', '--max-old-space-size=2048', `--import=${pathToFileURL(hook).href}`], process.env],
    // What `clinic doctor` sets: a hook beside a process-wide option a worker's NODE_OPTIONS may not carry.
    ['NODE_OPTIONS with --trace-events-enabled', [], { ...env, NODE_OPTIONS: `${env.NODE_OPTIONS} --trace-events-enabled --trace-event-categories v8` }],
  ] as const) {
    writeFileSync(log, '');
    const r = run([...args], e);
    t.equal(r.status, 0, `${label}: run succeeds${r.status === 0 ? '' : `: ${r.stderr}`}`);
    t.same(readFileSync(log, 'utf8').trim().split('\n'), ['0'], `${label}: the hook ran on thread 0 only`);
  }
});
