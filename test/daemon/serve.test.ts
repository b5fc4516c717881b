// `voxslab serve` as users run it: the built CLI in a child process, over loopback only.
import t from 'tap';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { readWavSamples, scratchDir } from '../helpers.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { runCommand } from '../../src/cli/run.js';
import { load, type RuntimeMemory } from '../../src/index.js';
import { native } from '../../src/native.js';
import { serve as serveModel, stop, talk as talkTo, type Served } from './daemon.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-serve-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const REPLY = '2';

const readWav = readWavSamples;
const speech = readWav(fixture);
const f32bytes = (x: Float32Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

async function reference(seed: number): Promise<Buffer> {
  const out = join(work, `ref-${seed}.wav`);
  await runCommand({ model, inputs: [fixture], outputs: [out], seed: String(seed), reply: REPLY, engine: 'single' }, () => undefined);
  return f32bytes(readWav(out).samples);
}

const serve = (args: string[]): Promise<Served> => serveModel(model, ['--reply', REPLY, ...args]);
const talk = (url: string, seed: number, headers: Record<string, string> = {}) => talkTo(url, speech, seed, headers);

async function get(url: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { headers });
}

t.test('two WebSocket conversations at once each get their reply, byte for byte their solo reply; the ledger is back at SIGTERM', async (t) => {
  const [refA, refB] = [await reference(11), await reference(12)];
  const s = await serve([]);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  const before = (await (await get(`${s.url}/v1/memory`)).json()) as { totals: { current: number } };
  const [a, b] = await Promise.all([talk(s.ws, 11), talk(s.ws, 12)]);
  t.ok(a.pcm.equals(refA), `conversation A: solo bytes (${a.pcm.length})`);
  t.ok(b.pcm.equals(refB), `conversation B: solo bytes (${b.pcm.length})`);
  t.same(
    a.events.map((e) => e.type).filter((x) => x !== 'text'),
    ['ready', 'speech_start', 'speech_end', 'turn_end'],
  );
  // Sockets opened by /v1/ws close their conversation with them.
  for (let i = 0; i < 50 && ((await (await get(`${s.url}/v1/conversations`)).json()) as { conversations: unknown[] }).conversations.length > 0; i++)
    await new Promise((r) => setTimeout(r, 20));
  const memory = (await (await get(`${s.url}/v1/memory`)).json()) as { owners: Record<string, { held: number }>; totals: { current: number } };
  t.equal(memory.totals.current, before.totals.current, 'the conversations returned their bytes');
  t.equal(
    Object.values(memory.owners).reduce((x, o) => x + o.held, 0),
    memory.totals.current,
    '/v1/memory: the owners sum to the process total',
  );
  const metrics = await (await get(`${s.url}/metrics`)).text();
  const lines = metrics.split('\n').filter((l) => l !== '');
  t.match(metrics, /\nvoxslab_capacity_conversations [1-9][0-9]*\n/, '/metrics: the measured capacity');
  t.match(metrics, /\nvoxslab_realtime_margin 1\n/, '/metrics: nothing open, the whole period left');
  t.match(s.stderr(), /compute capacity: [1-9][0-9]* conversations at once \(measured: a frame of 1, 2, 4, 8, 16 conversations at once takes /);
  const bad = lines.filter(
    (l) =>
      !/^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$/.test(l) &&
      !/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+|NaN$/.test(l),
  );
  t.same(bad, [], '/metrics parses as Prometheus text');
  t.match(metrics, /voxslab_turns_total 2/);
  t.match(metrics, /voxslab_memory_bytes\{owner="model\/0",category="weights"\} [1-9]/);
  t.match(metrics, /voxslab_first_audio_seconds_count 2/);
  // The resident set explained: the ledger's resident slabs, six threads' runtimes, the residual.
  const runtime = (memory as unknown as { runtime: RuntimeMemory }).runtime;
  t.same(
    runtime.threads.map((x) => x.thread),
    ['main', 'capture', 'frontend', 'conformer', 'depthformer', 'playback'],
    '/v1/memory: a runtime reading per thread',
  );
  t.ok(runtime.threads.every((x) => x.heapCommitted > 0) && runtime.ledgerResident > 0, 'each thread has a heap; the weights are resident');
  t.ok(runtime.cHeap > 0, `the C heap's arenas: ${runtime.cHeap} bytes`);
  t.equal(runtime.residual, runtime.rss - runtime.runtime - runtime.ledgerResident - runtime.files - runtime.cHeap, 'the residual is what none accounts for');
  t.ok(runtime.residual < runtime.rss, 'and less than the whole');
  for (const part of ['total', 'ledger', 'runtime', 'files', 'c_heap', 'residual'])
    t.match(metrics, new RegExp(`voxslab_resident_bytes\\{part="${part}"\\} -?[0-9]`), `/metrics: ${part}`);
  t.match(metrics, /voxslab_runtime_bytes\{thread="depthformer",kind="heap"\} [1-9]/);
  t.equal(await stop(s), 0, 'SIGTERM exits 0');
  t.match(s.stderr(), /stopped: 0 bytes held, 0 reserved/, 'the ledger and the reservations are back to nothing before exit');
});

t.test('admission: a third conversation beyond the cap gets 503 with Retry-After, before anything is carved', async (t) => {
  const probe = await load(model, { replySeconds: Number(REPLY) });
  const loaded = probe.snapshot().held.total;
  const { planned } = await probe.admission(16000);
  await probe.close();
  const s = await serve(['--memory', String(loaded + 2 * planned + Math.floor(planned / 2))]);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  const open = () => fetch(`${s.url}/v1/conversations`, { method: 'POST', body: JSON.stringify({ inputRate: 16000 }) });
  t.equal((await open()).status, 201);
  t.equal((await open()).status, 201);
  const ready = await get(`${s.url}/readyz`);
  t.equal(ready.status, 503, '/readyz says no more');
  t.equal(ready.headers.get('retry-after'), '2');
  const held = ((await (await get(`${s.url}/v1/memory`)).json()) as { totals: { current: number } }).totals.current;
  const third = await open();
  t.equal(third.status, 503);
  t.equal(third.headers.get('retry-after'), '2');
  t.match(((await third.json()) as { error: string }).error, /memory limit refused/);
  const after = ((await (await get(`${s.url}/v1/memory`)).json()) as { totals: { current: number } }).totals.current;
  t.equal(after, held, 'nothing was carved for it');
  // A refused WebSocket gets the same answer on the upgrade.
  const refused = await new Promise<number>((resolve) => {
    const ws = new WebSocket(`${s.ws}/v1/ws?inputRate=16000`);
    ws.on('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
    ws.on('open', () => resolve(101));
    ws.on('error', () => undefined);
  });
  t.equal(refused, 503);
  t.equal((await fetch(`${s.url}/v1/conversations/1`, { method: 'DELETE' })).status, 204);
  t.equal((await get(`${s.url}/readyz`)).status, 200, 'after a close it admits again');
  t.match(await (await get(`${s.url}/metrics`)).text(), /voxslab_admissions_refused_total 2/);
  t.equal(await stop(s), 0);
});

t.test('admission by compute: a daemon at its capacity answers /readyz 503 and refuses the next conversation; /metrics exports it', async (t) => {
  const s = await serve(['--capacity', '1']);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  t.equal((await get(`${s.url}/readyz`)).status, 200, 'below capacity: ready');
  t.match(await (await get(`${s.url}/healthz`)).json(), { capacity: 1 });
  t.match(s.stderr(), /compute capacity: 1 conversations at once \(--capacity\)/);
  const open = () => fetch(`${s.url}/v1/conversations`, { method: 'POST', body: JSON.stringify({ inputRate: 16000 }) });
  const first = await open();
  t.equal(first.status, 201);
  const { id } = (await first.json()) as { id: number };
  const ready = await get(`${s.url}/readyz`);
  t.equal(ready.status, 503, '/readyz says no more');
  t.equal(ready.headers.get('retry-after'), '2');
  t.match(await ready.json(), { ok: false, reason: '1 conversations open: the engine keeps 1 in real time' });
  const held = ((await (await get(`${s.url}/v1/memory`)).json()) as { totals: { current: number } }).totals.current;
  const second = await open();
  t.equal(second.status, 503);
  t.equal(second.headers.get('retry-after'), '2');
  t.match(((await second.json()) as { error: string }).error, /the engine keeps 1 in real time/);
  t.equal(((await (await get(`${s.url}/v1/memory`)).json()) as { totals: { current: number } }).totals.current, held, 'nothing was carved for it');
  const metrics = await (await get(`${s.url}/metrics`)).text();
  t.match(metrics, /\nvoxslab_capacity_conversations 1\n/);
  t.notMatch(metrics, /\nvoxslab_realtime_margin [0-9-]/, 'no margin without a calibration');
  t.equal((await fetch(`${s.url}/v1/conversations/${id}`, { method: 'DELETE' })).status, 204);
  t.equal((await get(`${s.url}/readyz`)).status, 200, 'after a close it admits again');
  t.equal(await stop(s), 0);
});

t.test('security: no token off loopback refuses to start; a wrong or missing token gets 401 everywhere', async (t) => {
  const refused = spawn(process.execPath, [cli, 'serve', '--model', model, '--host', '0.0.0.0', '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, VOXSLAB_TOKEN: '' },
  });
  let err = '';
  refused.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise((r) => refused.once('exit', r));
  t.equal(code, 2, 'exit 2');
  t.match(err, /needs --token/);
  const s = await serve(['--token', 's3cret-token']);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  for (const path of ['/healthz', '/readyz', '/v1/memory', '/metrics', '/v1/conversations', '/', '/nowhere']) {
    t.equal((await get(`${s.url}${path}`)).status, 401, `${path} without a token`);
    t.equal((await get(`${s.url}${path}`, { Authorization: 'Bearer wrong' })).status, 401, `${path} with a wrong token`);
  }
  t.equal((await fetch(`${s.url}/v1/conversations`, { method: 'POST', body: '{}', headers: { Authorization: 'Bearer s3cret-token-and-more' } })).status, 401);
  t.equal((await get(`${s.url}/healthz`, { Authorization: 'Bearer s3cret-token' })).status, 200, 'the right token passes');
  const upgrade = await new Promise<number>((resolve) => {
    const ws = new WebSocket(`${s.ws}/v1/ws`, { headers: { Authorization: 'Bearer nope' } });
    ws.on('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
    ws.on('open', () => resolve(101));
    ws.on('error', () => undefined);
  });
  t.equal(upgrade, 401, 'the WebSocket upgrade too');
  const ok = await talk(s.ws, 11, { Authorization: 'Bearer s3cret-token' });
  t.ok(ok.pcm.length > 0, 'with the token a conversation runs');
  t.equal(await stop(s), 0);
});

t.test('oversized and malformed frames close only their own socket, with a reason', async (t) => {
  const s = await serve(['--max-message', '4096']);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  const closeWith = (send: (ws: WebSocket) => void, format = 's16'): Promise<{ code: number; reason: string }> =>
    new Promise((resolve) => {
      const ws = new WebSocket(`${s.ws}/v1/ws?inputRate=16000&format=${format}`);
      ws.on('message', (d: Buffer, binary: boolean) => {
        if (!binary && (JSON.parse(d.toString()) as { type: string }).type === 'ready') send(ws);
      });
      ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }));
      ws.on('error', () => undefined);
    });
  const big = await closeWith((ws) => ws.send(Buffer.alloc(8192)));
  t.equal(big.code, 1009, 'a message over --max-message: 1009');
  const odd = await closeWith((ws) => ws.send(Buffer.alloc(3)));
  t.equal(odd.code, 1007);
  t.match(odd.reason, /3 bytes is not whole s16 samples/);
  const oddF32 = await closeWith((ws) => ws.send(Buffer.alloc(6)), 'f32');
  t.match(oddF32.reason, /not whole f32 samples/);
  const nan = Buffer.alloc(16);
  nan.writeFloatLE(Number.NaN, 8);
  const notFinite = await closeWith((ws) => ws.send(nan), 'f32');
  t.equal(notFinite.code, 1007, 'an f32 frame holding NaN: 1007, nothing of it queued');
  t.match(notFinite.reason, /field samples, offset 2: sample 2 of the block is NaN/);
  const garbage = await closeWith((ws) => ws.send('{not json'));
  t.equal(garbage.code, 1007);
  const unknown = await closeWith((ws) => ws.send(JSON.stringify({ type: 'dance' })));
  t.equal(unknown.code, 1008);
  t.match(unknown.reason, /unknown message type/);
  // update / cancel_reply / clear_input: a refused setting is an error event, the socket stays open.
  const session = (query: string, msgs: object[]): Promise<Record<string, unknown>[]> =>
    new Promise((resolve) => {
      const ws = new WebSocket(`${s.ws}/v1/ws?inputRate=16000&format=s16${query}`);
      const got: Record<string, unknown>[] = [];
      ws.on('message', (d: Buffer, binary: boolean) => {
        if (binary) return;
        const e = JSON.parse(d.toString()) as Record<string, unknown>;
        got.push(e);
        if (e.type === 'ready') for (const m of msgs) ws.send(JSON.stringify(m));
        if (got.filter((x) => x.type === 'updated' || x.type === 'error').length === msgs.filter((m) => 'silenceMs' in m).length) ws.close();
      });
      ws.on('close', () => resolve(got));
      ws.on('error', () => undefined);
    });
  const vadEvents = await session('&vad=true', [
    { type: 'cancel_reply' },
    { type: 'clear_input' },
    { type: 'update', silenceMs: 5 },
    { type: 'update', silenceMs: 900 },
  ]);
  const answers = vadEvents.filter((e) => e.type === 'updated' || e.type === 'error');
  t.match(answers[0], { type: 'error', code: 'ERR_VOXSLAB_ARGUMENT', message: /silenceMs must be an integer from 100/ }, 'a refused setting: an error event');
  t.match(answers[1], { type: 'updated', silenceMs: 900, minSpeechMs: 200 }, 'then the next update applies on the same socket');
  const plainEvents = await session('', [{ type: 'update', silenceMs: 900 }]);
  t.match(plainEvents.at(-1), { type: 'error', message: /opened without vad: true/ });
  // Garbage on the raw socket is refused by the HTTP parser; the daemon stays up.
  await new Promise<void>((resolve) => {
    const sock = connect(Number(new URL(s.url).port), '127.0.0.1', () => sock.end('\u0000\u0001garbage\r\n\r\n'));
    sock.resume(); // read the daemon's 400 and its end, so the socket closes
    sock.on('close', () => resolve());
    sock.on('error', () => resolve());
  });
  const ok = await talk(s.ws, 11);
  t.ok(ok.pcm.length > 0, 'the daemon still serves a conversation');
  const health = await get(`${s.url}/healthz`);
  t.equal(health.status, 200);
  const { placement } = (await health.json()) as { placement: { stage: string; cpus: number[]; helpers: number[][] }[] };
  t.same(
    placement.map((p) => p.stage),
    ['capture', 'frontend', 'conformer', 'depthformer', 'playback'],
    '/healthz: where each stage runs',
  );
  const allowed = native.allowedCpus();
  t.ok(
    placement.every((p) => p.cpus.length > 0 && p.cpus.every((c) => allowed.includes(c))),
    `on CPUs this process may use: ${placement.map((p) => `${p.stage}@${p.cpus.join('+')}`).join(', ')}`,
  );
  t.equal(await stop(s), 0);
});

t.test('a second signal during the graceful stop exits at once', async (t) => {
  const s = await serve([]);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  // Two different signals, so neither merges into the other while pending.
  s.proc.kill('SIGTERM');
  s.proc.kill('SIGINT');
  t.equal(await s.exited, 130, 'exit 130 without waiting for the stop');
  t.match(s.stderr(), /SIG(INT|TERM) while stopping: exiting now/);
});

t.test(
  'a WebSocket conversation with vad=true: the daemon finds the turn; no end_turn is sent',
  { skip: apmAvailable() ? false : 'no WebRTC audio processing' },
  async (t) => {
    const s = await serve([]);
    t.teardown(() => void s.proc.kill('SIGKILL'));
    const events = await new Promise<string[]>((resolve, reject) => {
      const ws = new WebSocket(`${s.ws}/v1/ws?inputRate=${speech.rate}&format=f32&vad=true`);
      const seen: string[] = [];
      ws.on('open', () => {
        const silence = new Float32Array(Math.round(1.5 * speech.rate));
        for (const part of [silence, speech.samples, silence]) {
          const all = Buffer.from(part.buffer, part.byteOffset, part.byteLength);
          for (let at = 0; at < all.length; at += 4096) ws.send(all.subarray(at, at + 4096));
        }
      });
      ws.on('message', (d: Buffer, binary: boolean) => {
        if (binary) return;
        const e = JSON.parse(d.toString()) as { type: string; reason?: string };
        if (e.type !== 'text') seen.push(e.reason === undefined ? e.type : `${e.type} ${e.reason}`);
        if (e.type === 'turn_end') ws.close(1000);
      });
      ws.on('close', () => resolve(seen));
      ws.on('error', reject);
    });
    t.same(
      events.filter((e) => e !== 'ready'),
      ['speech_start', 'speech_end vad', 'turn_end'],
      `events: ${events.join(', ')}`,
    );
    const bad = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${s.ws}/v1/ws?vad=maybe`);
      ws.on('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
      ws.on('open', () => resolve(101));
      ws.on('error', () => undefined);
    });
    t.equal(bad, 400, 'a vad that is not true or false is refused');
    t.equal(await stop(s), 0);
  },
);
