// The package as users get it: `npm pack`, installed from the tarball into a fresh project
// (the addon built by its install script), then README's library example run as written.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeExample, scratchDir } from '../helpers.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));

t.test('npm pack → install the tarball into a fresh project → README’s example holds a conversation', async (t) => {
  const work = scratchDir('voxslab-pack-');
  const env: NodeJS.ProcessEnv = { ...process.env, npm_config_fund: 'false', npm_config_audit: 'false', npm_config_update_notifier: 'false' };
  // Build against the installed Node's headers where they are (as .ci/run does): no download.
  if (env.npm_config_nodedir === undefined && existsSync('/usr/include/node/node.h')) env.npm_config_nodedir = '/usr';
  // `npm test` built dist already; packing must not rebuild it under the other running tests.
  execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', work], { cwd: root, env, stdio: 'pipe' });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  t.ok(tarball, 'npm pack wrote a tarball');
  const app = join(work, 'app');
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'voxslab-pack-check', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(work, tarball!)], { cwd: app, env, stdio: 'pipe', timeout: 600_000 });
  t.ok(existsSync(join(app, 'node_modules/voxslab/native/build/Release/voxslab_native.node')), 'the install script built the addon');
  writeFileSync(join(app, 'example.mjs'), readmeExample('library'));
  const out = execFileSync(process.execPath, ['example.mjs'], {
    cwd: app,
    env: { ...env, VOXSLAB_CACHE: join(work, 'cache') },
    encoding: 'utf8',
    timeout: 300_000,
  });
  t.match(out, /samples, first audio [0-9.]+ ms after the end of speech/, 'the example ran to its last line');
  t.match(out, /every byte back: 0 held/, 'and returned every byte');
  // The typed entry points resolve from the installed package.
  const types = readFileSync(join(app, 'node_modules/voxslab/dist/src/index.d.ts'), 'utf8');
  t.match(types, /api\/index\.js/);
  const bin = execFileSync(join(app, 'node_modules/.bin/voxslab'), ['version'], { encoding: 'utf8' });
  t.match(bin, /^\d+\.\d+\.\d+/, 'the voxslab binary runs');
});
