/**
 * The voice daemon: one Engine (the five stage workers) serving conversations over HTTP and
 * WebSocket. It listens on 127.0.0.1 unless told otherwise, and any other address needs a
 * bearer token. Admission refuses a conversation the cap (or the conversation limit) cannot
 * take with 503 and Retry-After, before anything is carved.
 *
 *   GET    /healthz                   liveness, model, headless, conversations
 *   GET    /readyz                    200 when another conversation would be admitted, else 503
 *   GET    /v1/memory                 the memory manifest (owners sum to the process total)
 *   GET    /metrics                   Prometheus text
 *   GET    /v1/conversations          the open conversations
 *   POST   /v1/conversations          open one: {"inputRate":16000,"format":"s16","seed":1,"vad":true}
 *   DELETE /v1/conversations/ID       close one
 *   WS     /v1/conversations/ID/ws    binary frames: PCM both ways; text frames: JSON events
 *   WS     /v1/ws?inputRate=&format=&seed=&vad=  open a conversation that lives as long as the socket
 *
 * On the socket the client sends binary PCM (the conversation's format, little-endian, mono)
 * and JSON text frames `{"type":"end_turn"}` or `{"type":"close"}`; the daemon sends reply PCM
 * as binary frames and every event as JSON (`speech_start`, `speech_end`, `text`, `turn_end`,
 * `error`). A malformed frame closes that socket only, with a reason.
 *
 * Thread contract: the main thread.
 */
import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { type Counter, type Histogram, Registry } from 'prom-client';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { ArgumentError, BadInputError, CapacityError, ClosedError, MemoryLimitError, UsageError, VoxslabError } from '../errors.js';
import { optionValue } from '../options.js';
import type { Conversation, ConversationSettings, Engine, SampleFormat, TurnSummary } from '../api/engine.js';
import { LogLines } from './log.js';
import { describeEntry, type Entry, newEntry, peakOf } from './entry.js';
import { checkBind, digest, HttpError, STATUS_TEXT } from './http.js';

export { checkBind } from './http.js';
import { daemonMetrics, type LoopDelay } from './metrics.js';
import { livePage } from './page.js';

import type { DuplexDevice } from '../core/session.js';
import type { ClockedDevice } from '../io/devices.js';

export interface DaemonOptions {
  host?: string;
  port?: number;
  /** Bearer token; required for any address but loopback. */
  token?: string;
  maxConversations?: number;
  maxConnections?: number;
  maxMessageBytes?: number;
  maxRequestBytes?: number;
  /** Seconds a client may send audio ahead of real time, or leave its replies unread, before its socket is closed. */
  stallSeconds?: number;
  /** Lines for the operator (start, refusals, shutdown). */
  log?: (line: string) => void;
}

/** Seconds a refused client should wait before asking again. */
const RETRY_AFTER = 2;
/**
 * Reply bytes a socket may hold unsent before its conversation's reply is held back in the
 * pipeline's rings, and the level at which it flows again. With the input side (at most a second
 * queued, then the socket is paused, plus one message of at most --max-message bytes), these
 * bound what one connection holds outside the cap.
 */
const OUTPUT_HIGH_BYTES = 1 << 20;
const OUTPUT_LOW_BYTES = 1 << 18;
/** How often a held-back socket is looked at (its buffer drained, or its client stalled too long). */
const OUTPUT_CHECK_MS = 50;
/** How long a request's headers may take to arrive. */
const HEADERS_MS = 10_000;
/** The JSON messages a client sends on a conversation's socket. */
const CLIENT_MESSAGES = ['end_turn', 'cancel_reply', 'clear_input', 'update', 'close'];

/** How long the same operator line again is counted rather than printed. */
export class Daemon {
  readonly engine: Engine;
  readonly server: Server;
  readonly host: string;
  readonly #wss: WebSocketServer;
  readonly #token: Buffer | null;
  readonly #limits: { conversations: number; message: number; request: number; stallMs: number };
  readonly #entries = new Map<string, Entry>();
  readonly #log: (line: string) => void;
  readonly #lines: LogLines;
  readonly registry = new Registry();
  readonly #refused: Counter;
  readonly #turns: Counter;
  readonly #bargeIns: Counter;
  readonly #firstAudio: Histogram;
  readonly #eventLoop: LoopDelay;
  readonly #sockets = new Set<Socket>();
  #nextId = 1;
  #draining = false;
  /** The devices a live conversation runs on (null: headless), and how to end it. */
  #devices: string | null = null;
  readonly #deviceStop = new AbortController();
  #deviceRun: Promise<void> | null = null;
  #xruns: (() => { underruns: number; overruns: number; dropped: number }) | null = null;

  private constructor(engine: Engine, options: DaemonOptions) {
    this.engine = engine;
    this.host = options.host ?? '127.0.0.1';
    const token = options.token ?? '';
    checkBind(this.host, token);
    this.#token = token === '' ? null : digest(token);
    this.#limits = {
      conversations: optionValue<number>('maxConversations', options.maxConversations),
      message: optionValue<number>('maxMessageBytes', options.maxMessageBytes),
      request: optionValue<number>('maxRequestBytes', options.maxRequestBytes),
      stallMs: 1000 * optionValue<number>('stallSeconds', options.stallSeconds),
    };
    this.#lines = new LogLines(options.log ?? (() => undefined));
    this.#log = (line) => this.#lines.line(line);
    // A request's headers (an upgrade's too) must arrive within HEADERS_MS: a client sending them
    // a byte at a time (slow loris) is answered 408 and closed, checked every second.
    this.server = createServer(
      { headersTimeout: HEADERS_MS, requestTimeout: 2 * HEADERS_MS, connectionsCheckingInterval: 1000 },
      (req, res) => void this.#http(req, res),
    );
    this.server.maxConnections = optionValue<number>('maxConnections', options.maxConnections);
    this.server.on('connection', (s) => {
      this.#sockets.add(s);
      s.once('close', () => this.#sockets.delete(s));
    });
    this.#wss = new WebSocketServer({ noServer: true, maxPayload: this.#limits.message });
    this.server.on('upgrade', (req, socket, head) => void this.#upgrade(req, socket as Socket, head));
    ({
      refused: this.#refused,
      turns: this.#turns,
      bargeIns: this.#bargeIns,
      firstAudio: this.#firstAudio,
      eventLoop: this.#eventLoop,
    } = daemonMetrics(this.registry, {
      engine,
      conversations: () => this.#entries.size,
      xruns: () => this.#xruns?.() ?? null,
    }));
  }

  /** Starts listening; resolves once the port is bound. */
  static async start(engine: Engine, options: DaemonOptions = {}): Promise<Daemon> {
    const d = new Daemon(engine, options);
    const port = optionValue<number>('port', options.port);
    await new Promise<void>((resolve, reject) => {
      d.server.once('error', reject);
      d.server.listen(port, d.host, () => {
        d.server.off('error', reject);
        resolve();
      });
    });
    return d;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get url(): string {
    const h = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `http://${h}:${this.port}`;
  }

  #authorized(req: IncomingMessage): boolean {
    if (this.#token === null) return true;
    const header = req.headers.authorization ?? '';
    let given = header.startsWith('Bearer ') ? header.slice(7) : '';
    // Browsers cannot set headers on a WebSocket: the token may come as a query parameter.
    if (given === '') given = new URL(req.url ?? '/', 'http://x').searchParams.get('access_token') ?? '';
    return timingSafeEqual(digest(given), this.#token);
  }

  async #http(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (!this.#authorized(req)) throw new HttpError(401, 'a valid bearer token is required', { 'WWW-Authenticate': 'Bearer' });
      const url = new URL(req.url ?? '/', 'http://x');
      const path = url.pathname;
      const method = req.method ?? 'GET';
      if (method === 'GET' && path === '/healthz')
        return this.#json(res, 200, {
          status: this.#draining ? 'draining' : 'ok',
          model: this.engine.config.name,
          headless: this.#devices === null,
          devices: this.#devices ?? 'none: WebSocket clients only',
          conversations: this.#entries.size,
          maxConversations: this.#limits.conversations,
          capacity: this.engine.capacity.conversations,
          // Where each stage worker and its compute helpers run (the CPUs each may use).
          placement: this.engine.pipeline.placement.map((w) => ({ stage: w.stage, cpus: w.affinity, helpers: w.helpers, pinError: w.pinError })),
          outputRate: this.engine.outputRate,
        });
      if (method === 'GET' && path === '/readyz') {
        // Ready means a conversation of the largest kind a client may open at 16 kHz fits: with VAD.
        const r = await this.#admission(16000, true);
        return this.#json(res, r.ok ? 200 : 503, r, r.ok ? {} : { 'Retry-After': String(RETRY_AFTER) });
      }
      if (method === 'GET' && path === '/v1/memory') return this.#json(res, 200, { ...this.engine.memory(), runtime: await this.engine.runtime() });
      if (method === 'GET' && path === '/metrics') {
        const text = await this.registry.metrics();
        res.writeHead(200, { 'Content-Type': this.registry.contentType });
        res.end(text);
        return;
      }
      if (method === 'GET' && (path === '/' || path === '/index.html')) {
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
        res.end(livePage());
        return;
      }
      if (path === '/v1/conversations') {
        if (method === 'GET') return this.#json(res, 200, { conversations: [...this.#entries.values()].map((e) => describeEntry(e)) });
        if (method === 'POST') {
          const body = await this.#body(req);
          const e = await this.#open(body, false);
          return this.#json(res, 201, describeEntry(e));
        }
        throw new HttpError(405, `${method} is not allowed on ${path}`, { Allow: 'GET, POST' });
      }
      const m = /^\/v1\/conversations\/([0-9]+)$/.exec(path);
      if (m !== null) {
        const e = this.#entries.get(m[1]!);
        if (e === undefined) throw new HttpError(404, `no conversation ${m[1]}`);
        if (method === 'GET') return this.#json(res, 200, describeEntry(e));
        if (method === 'DELETE') {
          await this.#close(e, 1000, 'closed by DELETE');
          res.writeHead(204);
          res.end();
          return;
        }
        throw new HttpError(405, `${method} is not allowed on ${path}`, { Allow: 'GET, DELETE' });
      }
      throw new HttpError(404, `no route ${method} ${path}`);
    } catch (error) {
      const e = this.#httpError(error);
      if (res.headersSent) res.destroy();
      else this.#json(res, e.status, { error: e.message }, e.headers);
    }
  }

  #httpError(error: unknown): HttpError {
    if (error instanceof HttpError) return error;
    if (error instanceof MemoryLimitError || error instanceof CapacityError) {
      this.#refused.inc();
      return new HttpError(503, error.message, { 'Retry-After': String(RETRY_AFTER) });
    }
    if (error instanceof ArgumentError || error instanceof BadInputError || error instanceof UsageError) return new HttpError(400, error.message);
    this.#log(`internal fault: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return new HttpError(500, error instanceof VoxslabError ? error.message : 'internal fault');
  }

  #json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    const text = `${JSON.stringify(body)}\n`;
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
    res.end(text);
  }

  /** A JSON request body no larger than the limit. */
  async #body(req: IncomingMessage): Promise<Record<string, unknown>> {
    const limit = this.#limits.request;
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > limit) throw new HttpError(413, `request body of ${declared} bytes exceeds the limit of ${limit}`);
    const parts: Buffer[] = [];
    let n = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      n += chunk.length;
      if (n > limit) throw new HttpError(413, `request body exceeds the limit of ${limit} bytes`);
      parts.push(chunk);
    }
    if (n === 0) return {};
    let v: unknown;
    try {
      v = JSON.parse(Buffer.concat(parts).toString('utf8'));
    } catch (error) {
      throw new HttpError(400, `request body is not JSON: ${(error as Error).message}`);
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new HttpError(400, 'request body must be a JSON object');
    return v as Record<string, unknown>;
  }

  async #admission(inputRate: number, vad: boolean): Promise<{ ok: boolean; reason: string; planned: number; free: number; conversations: number }> {
    const conversations = this.#entries.size;
    if (this.#draining) return { ok: false, reason: 'shutting down', planned: 0, free: 0, conversations };
    const a = await this.engine.admission(inputRate, vad);
    if (conversations >= this.#limits.conversations)
      return { ok: false, reason: `${conversations} of ${this.#limits.conversations} conversations open`, planned: a.planned, free: a.free, conversations };
    const cap = this.engine.capacity.conversations;
    return {
      ok: a.admit,
      reason: !a.bytes
        ? `a conversation needs ${a.planned} bytes; ${a.free} are free under the cap`
        : !a.compute
          ? `${conversations} conversations open: the engine keeps ${cap} in real time`
          : 'admits another conversation',
      planned: a.planned,
      free: a.free,
      conversations,
    };
  }

  async #open(body: Record<string, unknown>, ephemeral: boolean): Promise<Entry> {
    if (this.#draining) throw new HttpError(503, 'the daemon is shutting down', { 'Retry-After': String(RETRY_AFTER) });
    if (this.#entries.size >= this.#limits.conversations) {
      this.#refused.inc();
      throw new HttpError(503, `${this.#entries.size} of ${this.#limits.conversations} conversations are open`, { 'Retry-After': String(RETRY_AFTER) });
    }
    const known = new Set(['inputRate', 'format', 'seed', 'vad']);
    for (const k of Object.keys(body)) if (!known.has(k)) throw new HttpError(400, `unknown field '${k}' (fields: inputRate, format, seed, vad)`);
    if (body.vad !== undefined && typeof body.vad !== 'boolean') throw new HttpError(400, "field 'vad' must be true or false");
    const num = (k: string): number | undefined => {
      const v = body[k];
      if (v === undefined) return undefined;
      if (typeof v !== 'number') throw new HttpError(400, `field '${k}' must be a number`);
      return v;
    };
    const format = body.format ?? 's16';
    if (format !== 'f32' && format !== 's16') throw new HttpError(400, `field 'format' must be 'f32' or 's16'`);
    const options: Parameters<Engine['open']>[0] = { format };
    const inputRate = num('inputRate');
    const seed = num('seed');
    if (inputRate !== undefined) options.inputRate = inputRate;
    if (seed !== undefined) options.seed = seed;
    if (body.vad === true) options.vad = true;
    return this.#register(await this.engine.open(options), String(this.#nextId++), format, ephemeral);
  }

  /** Lists a new conversation and counts what it does. */
  #register(conversation: Conversation, id: string, format: SampleFormat, ephemeral: boolean): Entry {
    const entry = newEntry(conversation, id, format, ephemeral);
    this.#entries.set(id, entry);
    conversation.on('turn_end', (t: TurnSummary) => {
      this.#turns.inc();
      if (t.firstAudioMs !== null) this.#firstAudio.observe(t.firstAudioMs / 1000);
    });
    conversation.on('barge_in', () => this.#bargeIns.inc());
    conversation.on('error', (e) => this.#log(`conversation ${id}: ${e.message}`));
    conversation.once('close', () => this.#entries.delete(id));
    return entry;
  }

  async #close(e: Entry, code: number, reason: string): Promise<void> {
    const s = e.socket;
    e.socket = null;
    if (s !== null && s.readyState === s.OPEN) s.close(code, reason);
    await e.conversation.close();
  }

  /** Refuses an upgrade with a plain HTTP answer. */
  #refuse(socket: Socket, status: number, message: string, headers: Record<string, string> = {}): void {
    const body = `${JSON.stringify({ error: message })}\n`;
    const head = [
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Bad Request'}`,
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      'Connection: close',
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ];
    socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
  }

  async #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    try {
      if (!this.#authorized(req)) return this.#refuse(socket, 401, 'a valid bearer token is required', { 'WWW-Authenticate': 'Bearer' });
      const url = new URL(req.url ?? '/', 'http://x');
      let entry: Entry;
      const m = /^\/v1\/conversations\/([0-9]+)\/ws$/.exec(url.pathname);
      if (m !== null) {
        const e = this.#entries.get(m[1]!);
        if (e === undefined) return this.#refuse(socket, 404, `no conversation ${m[1]}`);
        if (e.socket !== null) return this.#refuse(socket, 409, `conversation ${m[1]} already has a socket`);
        entry = e;
      } else if (url.pathname === '/v1/ws') {
        const body: Record<string, unknown> = {};
        for (const k of ['inputRate', 'seed']) {
          const v = url.searchParams.get(k);
          if (v !== null) body[k] = Number(v);
        }
        const f = url.searchParams.get('format');
        if (f !== null) body.format = f;
        const vad = url.searchParams.get('vad');
        if (vad !== null) {
          if (vad !== 'true' && vad !== 'false' && vad !== '1' && vad !== '0') throw new HttpError(400, "query 'vad' must be true or false");
          body.vad = vad === 'true' || vad === '1';
        }
        entry = await this.#open(body, true);
      } else return this.#refuse(socket, 404, `no WebSocket at ${url.pathname}`);
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#attach(entry, ws));
    } catch (error) {
      const e = this.#httpError(error);
      this.#refuse(socket, e.status, e.message, e.headers);
    }
  }

  /** Wires a socket to its conversation: PCM and control in, PCM and events out. */
  #attach(e: Entry, ws: WebSocket): void {
    e.socket = ws;
    const c = e.conversation;
    const bytesPer = e.format === 'f32' ? 4 : 2;
    const stallMs = this.#limits.stallMs;
    const send = (event: Record<string, unknown>): void => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(event));
    };
    // Outgoing back-pressure: past OUTPUT_HIGH_BYTES unsent, the reply waits in the rings; a
    // client that reads nothing for stallMs is closed.
    let heldSince = -1;
    let watch: NodeJS.Timeout | null = null;
    const unwatch = (): void => {
      if (watch !== null) clearInterval(watch);
      watch = null;
    };
    const holdReply = (): void => {
      if (watch !== null) return;
      c.pauseOutput();
      heldSince = performance.now();
      watch = setInterval(() => {
        if (ws.readyState !== ws.OPEN) return unwatch();
        if (ws.bufferedAmount <= OUTPUT_LOW_BYTES) {
          unwatch();
          c.resumeOutput();
        } else if (performance.now() - heldSince > stallMs) {
          unwatch();
          fail(1008, `the client read none of its reply for ${stallMs / 1000} s`, true);
        }
      }, OUTPUT_CHECK_MS);
      watch.unref();
    };
    // Incoming: the socket is paused while a second of audio waits for the pipeline (until it has
    // taken it), and while the client is more than stallMs of audio ahead of real time (until real
    // time catches up: a burst is read at once, a flood at real time). A client held at real time
    // for stallMs on end, still sending, is closed.
    const opened = performance.now();
    let received = 0;
    let draining = false;
    let pacer: NodeJS.Timeout | null = null;
    let pacedSince = -1;
    const resumeIfFree = (): void => {
      if (!draining && pacer === null && !closing && ws.readyState === ws.OPEN) ws.resume();
    };
    const listeners = {
      speech_start: (x: object) => send({ type: 'speech_start', ...x }),
      speech_end: (x: object) => send({ type: 'speech_end', ...x }),
      text: (x: object) => send({ type: 'text', ...x }),
      barge_in: (x: object) => send({ type: 'barge_in', ...x }),
      turn_end: (x: object) => send({ type: 'turn_end', ...x }),
      error: (x: Error, info: { turn: number }) => send({ type: 'error', message: x.message, code: (x as VoxslabError).code, turn: info.turn }),
      audio: (x: { pcm: Float32Array | Int16Array }) => {
        if (ws.readyState !== ws.OPEN) return;
        ws.send(Buffer.from(x.pcm.buffer, x.pcm.byteOffset, x.pcm.byteLength));
        if (ws.bufferedAmount > OUTPUT_HIGH_BYTES) holdReply();
      },
    };
    for (const [k, f] of Object.entries(listeners)) c.on(k as 'text', f as never);
    const detach = (): void => {
      for (const [k, f] of Object.entries(listeners)) c.off(k as 'text', f as never);
    };
    c.once('close', () => {
      detach();
      if (ws.readyState === ws.OPEN) ws.close(1000, 'conversation closed');
    });
    send({ type: 'ready', ...describeEntry(e) });
    // One line per socket closed: frames that arrive while it closes are dropped unlogged.
    let closing = false;
    const fail = (code: number, reason: string, hard = false): void => {
      if (closing) return;
      closing = true;
      this.#log(`conversation ${e.id}: closing its socket: ${reason}`);
      // A client that reads nothing would never take the close frame: its socket is ended at once.
      if (hard) ws.terminate();
      else ws.close(code, reason.slice(0, 120));
    };
    ws.on('message', (data: RawData, binary: boolean) => {
      if (closing) return;
      try {
        const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
        if (binary) {
          if (buf.length % bytesPer !== 0) return fail(1007, `binary frame of ${buf.length} bytes is not whole ${e.format} samples`);
          received += buf.length / bytesPer;
          const now = performance.now();
          const aheadMs = (1000 * received) / c.inputRate - (now - opened);
          if (aheadMs <= stallMs) pacedSince = -1;
          else if (pacedSince < 0) pacedSince = now;
          else if (now - pacedSince > stallMs)
            return fail(1008, `audio sent faster than real time for ${stallMs / 1000} s (more than ${stallMs / 1000} s of it ahead)`);
          const room = c.writeBytes(buf);
          // After writeBytes: a block it refused (not finite) is not the input's level.
          e.inputPeak = peakOf(buf, e.format);
          if (!room && !draining) {
            draining = true;
            ws.pause();
            void c.drained().then(() => {
              draining = false;
              resumeIfFree();
            });
          }
          if (aheadMs > stallMs && pacer === null) {
            ws.pause();
            pacer = setTimeout(() => {
              pacer = null;
              resumeIfFree();
            }, aheadMs - stallMs);
            pacer.unref();
          }
          return;
        }
        let msg: unknown;
        try {
          msg = JSON.parse(buf.toString('utf8'));
        } catch {
          return fail(1007, 'text frame is not JSON');
        }
        const { type, ...rest } = (msg !== null && typeof msg === 'object' ? msg : {}) as { type?: unknown } & ConversationSettings;
        if (type === 'end_turn') c.endTurn();
        else if (type === 'cancel_reply') c.cancelReply();
        else if (type === 'clear_input') c.clearInput();
        else if (type === 'update') {
          // A setting the conversation refuses is the client's to mend: an error event, the socket open.
          try {
            c.update(rest);
            send({ type: 'updated', ...c.settings });
          } catch (error) {
            if (!(error instanceof ArgumentError)) throw error;
            send({ type: 'error', message: error.message, code: error.code });
          }
        } else if (type === 'close') void this.#close(e, 1000, 'closed by the client');
        else fail(1008, `unknown message type ${JSON.stringify(type)} (${CLIENT_MESSAGES.join(', ')})`);
      } catch (error) {
        // Samples that are not finite (the frame is refused whole) are the client's data: 1007. A
        // conversation closed under the socket is named by this daemon's id, not the library's index.
        if (error instanceof ClosedError) return fail(1000, 'conversation closed');
        fail(error instanceof BadInputError ? 1007 : 1011, error instanceof Error ? error.message : String(error));
      }
    });
    ws.on('error', (err) => this.#log(`conversation ${e.id}: socket error: ${err.message}`));
    ws.on('close', () => {
      unwatch();
      if (pacer !== null) clearTimeout(pacer);
      // A conversation that outlives its socket (opened over HTTP) does not stay held back.
      c.resumeOutput();
      detach();
      if (e.socket === ws) e.socket = null;
      if (e.ephemeral) void c.close();
    });
  }

  /**
   * Graceful stop: refuse new conversations, end the open ones (their sockets close with 1001),
   * stop listening, close the engine (every byte back to the cap).
   */
  /**
   * The daemon's own conversation on a duplex device (`--input-device`/`--output-device`): it
   * listens, answers and is interrupted there (echo cancellation, VAD and barge-in in the
   * pipeline), listed as conversation `device`, until the daemon closes or the device fails.
   * The transcript goes to the log.
   */
  async runDevice(device: DuplexDevice & ClockedDevice & { stop(): Promise<void>; overruns?: number }, label: string): Promise<void> {
    if (this.#deviceRun !== null) throw new UsageError('serve: one device conversation at a time');
    const conversation = await this.engine.open({ inputRate: device.rate, vad: true, echoDelayMs: Math.min(500, Math.round(device.latencyMs)) });
    this.#register(conversation, 'device', 'f32', false);
    this.#devices = label;
    this.#xruns = () => {
      const l = conversation.device;
      return { underruns: l?.underruns ?? 0, overruns: l?.overruns ?? 0, dropped: device.overruns ?? 0 };
    };
    const at = (): string => `[${(device.clock / device.rate).toFixed(2)} s]`;
    conversation.on('speech_start', () => this.#log(`device ${at()} user speaking`));
    conversation.on('speech_end', (e) => e.reason !== 'dropped' && this.#log(`device ${at()} user done`));
    conversation.on('barge_in', (e) => this.#log(`device ${at()} interrupted: the reply keeps ${e.heardFrames ?? 'none'} of its frames`));
    conversation.on('turn_end', (t) => this.#log(`device ${at()} assistant (${t.stop}): ${JSON.stringify(t.text)}`));
    this.#deviceRun = conversation
      .run(device, { seconds: 365 * 86400, signal: this.#deviceStop.signal })
      .then(
        () => undefined,
        (error: Error) => {
          this.#log(`device ${label}: ${error.message}; serving WebSocket clients only`);
          this.#devices = `failed: ${error.message}`;
        },
      )
      .finally(() => conversation.close());
  }

  async close(): Promise<void> {
    this.#draining = true;
    this.#deviceStop.abort();
    await this.#deviceRun;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const e of [...this.#entries.values()]) await this.#close(e, 1001, 'the daemon is shutting down');
    for (const ws of this.#wss.clients) ws.terminate();
    this.#wss.close();
    for (const s of this.#sockets) s.destroy();
    await closed;
    await this.engine.close();
    this.#eventLoop.stop();
    this.#lines.close();
  }
}
