// docs/daemon.md's HAProxy configuration in front of two daemons on loopback: a conversation the first
// daemon's admission cannot take goes to the second.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { readmeExample, readWavSamples, scratchDir } from '../helpers.js';
import { serve, stop, talk } from './daemon.js';

const haproxy = spawnSync('haproxy', ['-v']).status === 0;
const speech = readWavSamples(fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url)));

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function until(what: string, ok: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok().catch(() => false))) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test(
  'HAProxy (docs/daemon.md configuration): the second daemon takes what the first cannot admit',
  { skip: haproxy ? false : 'haproxy is not installed (apt-get install haproxy; .ci/run installs it)' },
  async (t) => {
    const work = scratchDir('voxslab-haproxy-');
    const model = join(work, 'tiny');
    makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
    // Each daemon admits one conversation.
    const a = await serve(model, ['--reply', '2', '--max-conversations', '1']);
    t.teardown(() => void a.proc.kill('SIGKILL'));
    const b = await serve(model, ['--reply', '2', '--max-conversations', '1']);
    t.teardown(() => void b.proc.kill('SIGKILL'));
    const front = await freePort();
    const config = readmeExample('haproxy')
      .replace('127.0.0.1:7800', `127.0.0.1:${front}`)
      .replace('127.0.0.1:7861', `127.0.0.1:${a.port}`)
      .replace('127.0.0.1:7862', `127.0.0.1:${b.port}`);
    t.not(config, readmeExample('haproxy'), 'the documented configuration, with this run’s ports');
    const cfg = join(work, 'haproxy.cfg');
    writeFileSync(cfg, config);
    const check = spawnSync('haproxy', ['-c', '-f', cfg], { encoding: 'utf8' });
    t.equal(check.status, 0, `haproxy accepts the configuration ${check.stderr}`);
    const proxy = spawn('haproxy', ['-db', '-f', cfg], { stdio: 'ignore' });
    t.teardown(() => void proxy.kill('SIGKILL'));
    const url = `http://127.0.0.1:${front}`;
    await until('haproxy to serve', async () => (await fetch(`${url}/healthz`)).status === 200);

    // A conversation that stays open fills daemon a.
    const first = await fetch(`${url}/v1/conversations`, { method: 'POST', body: JSON.stringify({ inputRate: 16000 }) });
    t.equal(first.status, 201);
    const count = async (s: { url: string }): Promise<number> =>
      ((await (await fetch(`${s.url}/v1/conversations`)).json()) as { conversations: unknown[] }).conversations.length;
    t.equal(await count(a), 1, 'balance first: the first conversation is on daemon a');
    t.equal((await fetch(`${a.url}/readyz`)).status, 503, 'daemon a says it is full');

    // At once, before any health check: a's 503 is retried on b.
    const second = await fetch(`${url}/v1/conversations`, { method: 'POST', body: JSON.stringify({ inputRate: 16000 }) });
    t.equal(second.status, 201, 'the second conversation is admitted');
    t.equal(await count(b), 1, '… by daemon b');
    t.equal(await count(a), 1);
    await fetch(`${b.url}/v1/conversations/1`, { method: 'DELETE' });

    // After the health check has marked a down, a WebSocket conversation goes to b and talks.
    await new Promise((r) => setTimeout(r, 1200));
    const turn = await talk(url.replace('http:', 'ws:'), speech, 5);
    t.ok(turn.pcm.length > 0, 'a WebSocket conversation through HAProxy gets its reply');
    t.match(await (await fetch(`${b.url}/metrics`)).text(), /voxslab_turns_total 1/, 'daemon b answered it');
    t.match(await (await fetch(`${a.url}/metrics`)).text(), /voxslab_turns_total 0/);
    t.equal(await stop(a), 0);
    t.equal(await stop(b), 0);
  },
);
