// The README's daemon example, run as written against a daemon on loopback.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { spawnServe } from '../../src/daemon/child.js';
import { readmeExample } from '../helpers.js';

t.test('README daemon example: one turn over the WebSocket, its text and its reply samples', async (t) => {
  const serve = await spawnServe(['--model', 'tiny', '--port', '0', '--reply', '2']);
  try {
    // Next to the compiled tests, so `import 'ws'` resolves from this package's dependencies.
    const file = fileURLToPath(new URL('./readme-daemon-example.mjs', import.meta.url));
    writeFileSync(file, readmeExample('daemon'));
    const out = execFileSync(process.execPath, [file], { env: { ...process.env, VOXSLAB_URL: serve.ws }, encoding: 'utf8', timeout: 120_000 });
    t.match(out, /\n[1-9][0-9]* samples of reply\n$/, 'the example ran to its last line with reply audio');
  } finally {
    serve.proc.kill('SIGTERM');
    t.equal(await serve.exited, 0, 'the daemon exits 0 on SIGTERM');
  }
});
