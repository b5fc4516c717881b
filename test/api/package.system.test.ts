// The package as users get it: `npm pack`, installed from the tarball into a fresh project
// (the addon built by its install script), then README's library example run as written.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeExample, scratchDir } from '../helpers.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** The application: only what the README and the declarations say. */
const APP = `import { load, type Conversation, type Engine } from 'voxslab';

let conversation: Conversation;
let engine: Engine;
{
  await using e = await load('tiny', { memoryLimit: '1GiB', replySeconds: 6 });
  await using conv = await e.open({ inputRate: 16000, vad: true });
  engine = e;
  conversation = conv;
  // A voiced buzz (120 Hz and its harmonics) that the VAD takes for speech.
  const tone = (s: number) =>
    Float32Array.from({ length: 16000 * s }, (_, i) => {
      let v = 0;
      for (let h = 1; h <= 20; h++) v += Math.sin((2 * Math.PI * 120 * h * i) / 16000) / h;
      return 0.2 * v * (0.6 + 0.4 * Math.sin((2 * Math.PI * 4 * i) / 16000));
    });
  const silence = (s: number) => new Float32Array(16000 * s);
  let first = true;
  conv.on('audio', () => {
    if (first) {
      first = false;
      conv.cancelReply();
    }
  });
  for (const part of [silence(1), tone(1), silence(1)]) conv.write(part);
  const cut = await conv.nextTurn();
  console.log('cancelled:', cut.stop);
  conv.update({ silenceMs: 900 });
  console.log('silence now', conv.settings.silenceMs, 'ms');
  for (const part of [tone(1), silence(2)]) conv.write(part);
  const next = await conv.nextTurn();
  console.log('next turn answered:', next.frames, 'frames');
}
console.log('after await using: closed', conversation.closed + ',', engine.snapshot().held.total, 'bytes held');
`;

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

  // An application in TypeScript, type-checked against the installed declarations: it
  // interrupts a reply, changes the silence mid-call and disposes with `await using`.
  writeFileSync(join(app, 'app.ts'), APP);
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      // As `tsc --init` sets up a Node project: Node's types (this repository's copy) and skipLibCheck.
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2022', 'ESNext.Disposable'],
        strict: true,
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [join(root, 'node_modules/@types')],
      },
      files: ['app.ts'],
    }),
  );
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
  const ran = execFileSync(process.execPath, ['app.js'], { cwd: app, env: { ...env, VOXSLAB_CACHE: join(work, 'cache') }, encoding: 'utf8', timeout: 300_000 });
  t.match(ran, /cancelled: interrupted/, 'cancelReply() interrupted the reply');
  t.match(ran, /silence now 900 ms/, 'update() changed the silence mid-call');
  t.match(ran, /next turn answered: \d+ frames/, 'the conversation went on');
  t.match(ran, /after await using: closed true, 0 bytes held/, 'await using closed the conversation and the engine');
});
