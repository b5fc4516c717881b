// The daemon under clients that do not keep to real time: one that floods PCM as fast as the
// socket takes it, one that never reads its reply. The daemon's memory outside the cap stays
// bounded (read from /proc while it runs), each socket is closed with a reason after the stall
// limit, in one log line naming the daemon's conversation id. Both failed before back-pressure:
// a flood grew the daemon's RSS by gigabytes.
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { scratchDir } from '../helpers.js';
import { serve, stop, type Served } from './daemon.js';

const work = scratchDir('voxslab-pressure-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const MiB = 2 ** 20;

/** The daemon's resident bytes now. */
const rss = (s: Served): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${s.proc.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The daemon's RSS at rest: the median of a few readings after a first conversation has warmed it. */
async function idleRss(s: Served): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < 5; i++) {
    xs.push(rss(s));
    await sleep(100);
  }
  return xs.sort((a, b) => a - b)[2]!;
}

function opened(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.on('message', (d: Buffer, binary: boolean) => {
      if (!binary && (JSON.parse(d.toString()) as { type: string }).type === 'ready') resolve(ws);
    });
    ws.on('error', reject);
  });
}

/**
 * Sends PCM as fast as the socket takes it (keeping this side's own buffer under 4 MiB) for
 * `ms`, or until the daemon closes it; the daemon's peak RSS meanwhile, and how the socket ended.
 */
async function flood(s: Served, ms: number): Promise<{ peak: number; sent: number; closed: { code: number; reason: string } | null }> {
  const ws = await opened(`${s.ws}/v1/ws?inputRate=16000&format=s16`);
  let closed: { code: number; reason: string } | null = null;
  ws.on('close', (code, reason) => {
    closed = { code, reason: reason.toString() };
  });
  const chunk = Buffer.alloc(64 << 10, 1);
  let sent = 0;
  let peak = 0;
  const until = performance.now() + ms;
  while (performance.now() < until && closed === null) {
    while (ws.readyState === ws.OPEN && ws.bufferedAmount < 4 * MiB) {
      ws.send(chunk);
      sent += chunk.length;
    }
    peak = Math.max(peak, rss(s));
    await sleep(20);
  }
  if (ws.readyState === ws.OPEN) ws.terminate();
  return { peak, sent, closed };
}

/**
 * A daemon with `--stall-limit stall`, warmed by a first flood (every thread's heap grown to
 * what such a conversation needs), and its RSS at rest after it.
 */
async function warmedFlood(t: Test, stall: string): Promise<{ s: Served; idle: number }> {
  const s = await serve(model, ['--reply', '2', '--stall-limit', stall]);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  await flood(s, 2000);
  await sleep(500);
  return { s, idle: await idleRss(s) };
}

t.test('with no stall limit, a flooding client is read only as fast as the pipeline takes its audio', async (t) => {
  const { s, idle } = await warmedFlood(t, '3600');
  const f = await flood(s, 8000);
  // Real time is 32 KB/s of s16 at 16 kHz: the client offered hundreds of times that.
  t.ok(f.sent > 16 * MiB, `the client pushed as much as the socket took (${(f.sent / MiB).toFixed(0)} MiB offered in 8 s)`);
  // Each socket read is a buffer of its own, garbage once the pipeline has the audio; V8 collects
  // such buffers when some 64 MiB of them wait, so that is the bound here (unpaced it grew without one).
  t.ok(f.peak - idle <= 64 * MiB, `RSS grew ${((f.peak - idle) / MiB).toFixed(1)} MiB over idle ${(idle / MiB).toFixed(0)} MiB while it lasted`);
  await sleep(1000);
  const after = rss(s);
  t.ok(Math.abs(after - idle) <= 0.1 * idle, `after it left: ${(after / MiB).toFixed(0)} MiB against idle ${(idle / MiB).toFixed(0)} MiB`);
  t.equal(await stop(s), 0);
});

t.test('a client sending faster than real time is read at real time, then closed after the stall limit: RSS within 32 MiB of idle', async (t) => {
  const { s, idle } = await warmedFlood(t, '2');
  const start = performance.now();
  const f = await flood(s, 15_000);
  const lasted = performance.now() - start;
  t.ok(f.closed !== null, `the daemon closed the socket (after ${(lasted / 1000).toFixed(1)} s)`);
  t.ok(lasted < 10_000, 'within the stall limit and the burst it allows');
  t.equal(f.closed?.code, 1008);
  t.match(f.closed?.reason, /audio sent faster than real time for 2 s \(more than 2 s of it ahead\)/);
  t.ok(f.peak - idle <= 32 * MiB, `RSS grew ${((f.peak - idle) / MiB).toFixed(1)} MiB over idle ${(idle / MiB).toFixed(0)} MiB while it lasted`);
  await sleep(300);
  const lines = s
    .stderr()
    .split('\n')
    .filter((l) => l.includes('closing its socket'));
  t.equal(lines.length, 2, `one line a flood: ${lines.join(' | ')}`);
  t.match(lines[1], /^conversation 2: closing its socket: audio sent faster/, 'naming the daemon’s own id');
  // A client at device pace is not touched by the limit.
  const ws = await opened(`${s.ws}/v1/ws?inputRate=16000&format=s16`);
  const pace = Buffer.alloc(640);
  for (let i = 0; i < 150; i++) {
    ws.send(pace);
    await sleep(20);
  }
  t.equal(ws.readyState, ws.OPEN, '3 s at device pace: still open');
  ws.close();
  t.equal(await stop(s), 0);
});

t.test('a client that never reads its reply holds it in the rings, and is closed after the stall limit', async (t) => {
  // f32 at 96 kHz: the reply outgrows the socket buffers of loopback TCP in seconds.
  const s = await serve(model, ['--reply', '120', '--rate', '96000', '--stall-limit', '2']);
  t.teardown(() => void s.proc.kill('SIGKILL'));
  const speech = Buffer.alloc(16000 * 4 * 2);
  for (let i = 0; i < speech.length / 4; i++) speech.writeFloatLE(0.3 * Math.sin(i / 7) * Math.sin(i / 3000), 4 * i);
  // Warm: the same turn once with a client that reads it all.
  const reader = await opened(`${s.ws}/v1/ws?inputRate=16000&format=f32&seed=1`);
  const done = new Promise<void>((resolve) =>
    reader.on('message', (d: Buffer, binary: boolean) => {
      if (!binary && (JSON.parse(d.toString()) as { type: string }).type === 'turn_end') resolve();
    }),
  );
  reader.send(speech);
  reader.send(JSON.stringify({ type: 'end_turn' }));
  await done;
  reader.close();
  await sleep(500);
  const idle = await idleRss(s);
  const ws = await opened(`${s.ws}/v1/ws?inputRate=16000&format=f32&seed=1`);
  ws.send(speech);
  ws.send(JSON.stringify({ type: 'end_turn' }));
  // The client stops reading: its socket's receive buffer and then the daemon's send buffer fill.
  ws.pause();
  let peak = 0;
  const until = performance.now() + 15_000;
  while (performance.now() < until && !s.stderr().includes('read none of its reply')) {
    peak = Math.max(peak, rss(s));
    await sleep(50);
  }
  t.match(s.stderr(), /conversation 2: closing its socket: the client read none of its reply for 2 s/);
  t.ok(peak - idle <= 32 * MiB, `RSS grew ${((peak - idle) / MiB).toFixed(1)} MiB over idle while the reply was held`);
  await sleep(300);
  const list = (await (await fetch(`${s.url}/v1/conversations`)).json()) as { conversations: unknown[] };
  t.equal(list.conversations.length, 0, 'its conversation is closed and its bytes returned');
  ws.terminate();
  t.equal(await stop(s), 0);
});

t.test('the operator log prints a repeated line once, then one summary with the count and the first and last time', async (t) => {
  const { LogLines } = await import('../../src/daemon/log.js');
  const out: string[] = [];
  const log = new LogLines((l) => out.push(l));
  for (let i = 0; i < 4450; i++) log.line('conversation 3: closing its socket: conversation closed');
  log.line('conversation 4: closing its socket: conversation closed');
  t.same(out, ['conversation 3: closing its socket: conversation closed', 'conversation 4: closing its socket: conversation closed'], 'each line once');
  log.close();
  t.equal(out.length, 3);
  t.match(out[2], /^conversation 3: closing its socket: conversation closed \(4449 more time\(s\), \d{4}-\d\d-\d\dT[\d:.]+Z to \d{4}-\d\d-\d\dT[\d:.]+Z\)$/);
});
