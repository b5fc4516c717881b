/**
 * The load test's client process (`bench serve`): WebSocket conversations with a `voxslab serve`
 * daemon, run apart from it and from the bench. It reads one JSON LoadPlan on stdin and prints
 * one JSON LoadReport on stdout.
 *
 * A well-behaved client speaks real speech at device pace (20 ms of 16 kHz s16 every 20 ms), ends
 * its turn, and plays the reply at device pace: a player starts at the reply's first sample and
 * consumes it in real time; the socket is paused while more than a second waits to be played.
 * An underrun is the player finding nothing while the reply has not ended.
 *
 * The abusers: a flood (PCM as fast as the socket takes it), a non-reader (a turn every half
 * second, its socket never read), slow-loris upgrades (a request header a byte a second), and
 * garbage frames (frames that are not samples, text that is not JSON).
 */
import { connect, type Socket } from 'node:net';
import WebSocket from 'ws';

export interface LoadPlan {
  url: string;
  /** 16 kHz speech, f32 little-endian, base64: one utterance per turn, used in turn. */
  utterances: string[];
  outputRate: number;
  /** Well-behaved conversations to open, one every `rampMs`; each speaks until `untilMs` from the start. */
  clients: number;
  rampMs: number;
  untilMs: number;
  /** Abusers alongside (0 of each for a clean run). */
  floods: number;
  nonReaders: number;
  slowLoris: number;
  garbage: number;
}

export interface ClientReport {
  /** Admitted: the socket opened; else the HTTP status and Retry-After of the refusal. */
  admitted: boolean;
  status: number;
  retryAfter: string | null;
  /** A refusal's body (the daemon's reason), else null. */
  refusal: string | null;
  /** Each turn's first reply sample after end_turn, ms. */
  firstAudioMs: number[];
  turns: number;
  underrunMs: number;
  /** Closed by the daemon or in error while speaking (an admitted conversation lost). */
  lost: string | null;
}

export interface LoadReport {
  clients: ClientReport[];
  abusers: { kind: string; outcome: string }[];
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const CHUNK = 320; // 20 ms at 16 kHz

function toS16(x: Float32Array): Buffer {
  const b = Buffer.alloc(2 * x.length);
  for (let i = 0; i < x.length; i++) b.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(x[i]! * 32768))), 2 * i);
  return b;
}

/** Opens a conversation socket; resolves with it, or with the refusal's status, Retry-After and body. */
function open(url: string): Promise<{ ws: WebSocket | null; status: number; retryAfter: string | null; refusal: string | null }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(`${url}/v1/ws?inputRate=16000&format=s16`);
    ws.once('open', () => resolve({ ws, status: 101, retryAfter: null, refusal: null }));
    ws.once('unexpected-response', (_req, res) => {
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      // 'close' follows the body's end, and an aborted body too: the refusal is never waited on forever.
      res.once('close', () => {
        const refusal = Buffer.concat(parts).toString('utf8').slice(0, 400);
        resolve({ ws: null, status: res.statusCode ?? 0, retryAfter: (res.headers['retry-after'] as string | undefined) ?? null, refusal });
        ws.terminate();
      });
    });
    ws.once('error', () => resolve({ ws: null, status: 0, retryAfter: null, refusal: null }));
  });
}

/** A well-behaved conversation: turns at device pace until `until` (performance.now()). */
async function wellBehaved(plan: LoadPlan, speech: Buffer[], until: number, seed: number): Promise<ClientReport> {
  const r: ClientReport = { admitted: false, status: 0, retryAfter: null, refusal: null, firstAudioMs: [], turns: 0, underrunMs: 0, lost: null };
  const o = await open(plan.url);
  r.status = o.status;
  r.retryAfter = o.retryAfter;
  r.refusal = o.refusal;
  if (o.ws === null) return r;
  r.admitted = true;
  const ws = o.ws;
  const rate = plan.outputRate;
  // The reply in progress: samples received, the player's start, when end_turn went.
  let received = 0;
  let playStart = -1;
  let endedAt = -1;
  let replyEnded = false;
  let paused = false;
  let turnDone: (() => void) | null = null;
  const played = (): number => (playStart < 0 ? 0 : ((performance.now() - playStart) * rate) / 1000);
  const closed = new Promise<void>((resolve) =>
    ws.once('close', (code, reason) => {
      if (performance.now() < until && r.lost === null) r.lost = `closed ${code} ${reason.toString()}`;
      resolve();
      turnDone?.();
    }),
  );
  ws.on('error', (e) => {
    r.lost ??= `error ${e.message}`;
  });
  ws.on('message', (d: Buffer, binary: boolean) => {
    if (!binary) {
      const e = JSON.parse(d.toString()) as { type: string };
      if (e.type === 'turn_end') replyEnded = true;
      if (e.type === 'error') r.lost ??= `error event ${d.toString()}`;
      return;
    }
    const now = performance.now();
    if (playStart < 0) {
      playStart = now;
      r.firstAudioMs.push(now - endedAt);
    } else {
      const gap = played() - received;
      if (gap > 0) {
        // The player ran dry: it waits, then resumes from here.
        r.underrunMs += (gap * 1000) / rate;
        playStart += (gap * 1000) / rate;
      }
    }
    received += d.length / 2;
    // Device pace: hold the socket while more than a second waits to be played.
    if (!paused && received - played() > rate) {
      paused = true;
      ws.pause();
    }
  });
  const pump = setInterval(() => {
    if (paused && received - played() < rate / 2) {
      paused = false;
      ws.resume();
    }
    if (replyEnded && playStart >= 0 && played() >= received) turnDone?.();
  }, 10);
  try {
    for (let k = seed; performance.now() < until && ws.readyState === ws.OPEN; k++) {
      const s = speech[k % speech.length]!;
      const start = performance.now();
      for (let at = 0, i = 0; at < s.length && ws.readyState === ws.OPEN; at += 2 * CHUNK, i++) {
        ws.send(s.subarray(at, at + 2 * CHUNK));
        await sleep(Math.max(0, start + 20 * (i + 1) - performance.now()));
      }
      received = 0;
      playStart = -1;
      replyEnded = false;
      const done = new Promise<void>((resolve) => {
        turnDone = resolve;
      });
      endedAt = performance.now();
      ws.send(JSON.stringify({ type: 'end_turn' }));
      await done;
      turnDone = null;
      if (ws.readyState !== ws.OPEN) break;
      r.turns++;
      await sleep(500);
    }
  } finally {
    clearInterval(pump);
    if (ws.readyState === ws.OPEN) ws.close(1000);
    await closed;
  }
  return r;
}

/** PCM as fast as the socket takes it, until `until`. */
async function flood(url: string, until: number): Promise<string> {
  const o = await open(url);
  if (o.ws === null) return `refused ${o.status}`;
  const ws = o.ws;
  const block = Buffer.alloc(64 * 1024, 1);
  let sent = 0;
  while (performance.now() < until && ws.readyState === ws.OPEN) {
    if (ws.bufferedAmount > 4 << 20) await sleep(1);
    else {
      ws.send(block);
      sent += block.length;
    }
    if (sent % (16 << 20) === 0) await sleep(0);
  }
  const state = ws.readyState === ws.OPEN ? 'still open' : 'closed by the daemon';
  ws.terminate();
  return `${state} after ${(sent / 2 ** 20).toFixed(0)} MiB sent`;
}

/** One turn, then the socket is never read again. */
async function nonReader(url: string, speech: Buffer, until: number): Promise<string> {
  const o = await open(url);
  if (o.ws === null) return `refused ${o.status}`;
  const ws = o.ws;
  let closed = '';
  ws.once('close', (code) => {
    closed = `closed by the daemon (${code})`;
  });
  // Never read: the TCP socket stops being drained. A turn every half second, so the replies
  // outgrow the kernel's socket buffers and the daemon's own bound.
  (ws as unknown as { _socket: Socket })._socket.pause();
  // A paused socket does not see the daemon's end: a write that fails does.
  ws.on('error', () => undefined);
  const start = performance.now();
  for (let next = 0; performance.now() < until && closed === '' && ws.readyState === ws.OPEN; await sleep(100)) {
    if (performance.now() < next) continue;
    ws.send(speech);
    ws.send(JSON.stringify({ type: 'end_turn' }));
    next = performance.now() + 500;
  }
  const after = `after ${((performance.now() - start) / 1000).toFixed(0)} s`;
  const state = closed || (ws.readyState === ws.OPEN ? 'still open' : 'closed by the daemon');
  ws.terminate();
  return `${state} ${after}`;
}

/** An upgrade request sent a byte a second until `until`. */
async function slowLoris(url: string, until: number): Promise<string> {
  const u = new URL(url);
  const req = `GET /v1/ws HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n`;
  const sock = connect(Number(u.port), u.hostname);
  let closed = false;
  sock.on('close', () => {
    closed = true;
  });
  sock.on('error', () => undefined);
  for (let i = 0; performance.now() < until && !closed; i++) {
    sock.write(req[i % req.length]!);
    await sleep(1000);
  }
  sock.destroy();
  return closed ? 'closed by the daemon' : 'still open';
}

/** Connections that send frames that are not samples, or text that is not JSON, one after another. */
async function garbage(url: string, until: number): Promise<string> {
  let n = 0;
  const codes = new Map<number, number>();
  while (performance.now() < until) {
    const o = await open(url);
    if (o.ws === null) {
      await sleep(200);
      continue;
    }
    const ws = o.ws;
    const code = await new Promise<number>((resolve) => {
      ws.once('close', (c) => resolve(c));
      ws.send(n % 2 === 0 ? Buffer.from([1, 2, 3]) : '{not json');
    });
    codes.set(code, (codes.get(code) ?? 0) + 1);
    n++;
    await sleep(100);
  }
  return `${n} connections closed: ${[...codes].map(([c, k]) => `${k}× ${c}`).join(', ')}`;
}

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const plan = JSON.parse(Buffer.concat(chunks).toString('utf8')) as LoadPlan;
  const speech = plan.utterances.map((b64) => {
    const raw = Buffer.from(b64, 'base64');
    return toS16(new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4));
  });
  const t0 = performance.now();
  const until = t0 + plan.untilMs;
  const abusers: Promise<{ kind: string; outcome: string }>[] = [];
  const tag = (kind: string, p: Promise<string>) => p.then((outcome) => ({ kind, outcome }));
  for (let i = 0; i < plan.floods; i++) abusers.push(tag('flood', flood(plan.url, until)));
  for (let i = 0; i < plan.nonReaders; i++) abusers.push(tag('non-reader', nonReader(plan.url, speech[0]!, until)));
  for (let i = 0; i < plan.slowLoris; i++) abusers.push(tag('slow-loris', slowLoris(plan.url, until)));
  for (let i = 0; i < plan.garbage; i++) abusers.push(tag('garbage', garbage(plan.url, until)));
  const clients: Promise<ClientReport>[] = [];
  for (let i = 0; i < plan.clients; i++) {
    await sleep(Math.max(0, t0 + i * plan.rampMs - performance.now()));
    clients.push(wellBehaved(plan, speech, until, i));
  }
  const report: LoadReport = { clients: await Promise.all(clients), abusers: await Promise.all(abusers) };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

await main();
