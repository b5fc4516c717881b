/**
 * `voxslab bench serve`: the daemon as a client sees it, beside the library in the same run.
 *
 * The daemon runs as `voxslab serve` in a child process on loopback; the peer is the same work
 * through the library API in this process (no HTTP, no WebSocket).
 *
 * - WebSocket round trip: ping → pong through the daemon, idle and while two conversations
 *   generate (p50, p99).
 * - First reply sample after the end of speech: the fixture fed at device pace (20 ms chunks
 *   every 20 ms), then `end_turn`; client-side time to the first reply frame (median of rounds).
 * - Throughput: the fixture fed at once, reply audio seconds per wall second, for one
 *   conversation and two at once.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { load as loadEngine, type Engine } from '../src/api/engine.js';
import { spawnServe } from '../src/daemon/child.js';
import { resolveModel } from '../src/io/checkpoint.js';
import { readMonoWav } from '../src/io/files.js';
import { median, quantiles as quantilesAt, round } from './util.js';

const quantiles = (xs: number[]): { p50: number; p99: number } => quantilesAt(xs, 3);
import { formatLoad, type LoadResult, loadTest } from './load.js';
import { defaultOf } from '../src/options.js';

const FIXTURE = fileURLToPath(new URL('../../test/fixtures/hello.wav', import.meta.url));
const REPLY = 4;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface TurnTimes {
  firstAudioMs: number;
  wallMs: number;
  audioSeconds: number;
}

/** One turn over a socket: paced (device pace) or all at once. */
function socketTurn(url: string, speech: { rate: number; samples: Float32Array }, paced: boolean, outputRate: number): Promise<TurnTimes> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}/v1/ws?inputRate=${speech.rate}&format=f32`);
    let start = 0;
    let ended = 0;
    let first = -1;
    let samples = 0;
    ws.on('open', () => {
      void (async () => {
        start = performance.now();
        const step = paced ? Math.round(speech.rate / 50) : 4096;
        for (let at = 0; at < speech.samples.length; at += step) {
          const x = speech.samples.subarray(at, at + step);
          ws.send(Buffer.from(x.buffer, x.byteOffset, x.byteLength));
          if (paced) await sleep(20);
        }
        ws.send(JSON.stringify({ type: 'end_turn' }));
        ended = performance.now();
      })();
    });
    ws.on('message', (d: Buffer, binary: boolean) => {
      if (binary) {
        if (first < 0) first = performance.now();
        samples += d.length / 4;
      } else if ((JSON.parse(d.toString()) as { type: string }).type === 'turn_end') {
        const now = performance.now();
        ws.close();
        resolve({ firstAudioMs: first - ended, wallMs: now - start, audioSeconds: samples / outputRate });
      }
    });
    ws.on('error', reject);
  });
}

async function libraryTurn(engine: Engine, speech: { rate: number; samples: Float32Array }, paced: boolean): Promise<TurnTimes> {
  const conv = await engine.open({ inputRate: speech.rate });
  let first = -1;
  let samples = 0;
  conv.on('audio', (e) => {
    if (first < 0) first = performance.now();
    samples += e.pcm.length;
  });
  const start = performance.now();
  const step = paced ? Math.round(speech.rate / 50) : 4096;
  for (let at = 0; at < speech.samples.length; at += step) {
    conv.write(speech.samples.subarray(at, at + step));
    if (paced) await sleep(20);
  }
  conv.endTurn();
  const ended = performance.now();
  await conv.nextTurn();
  const wallMs = performance.now() - start;
  await conv.close();
  return { firstAudioMs: first - ended, wallMs, audioSeconds: samples / engine.outputRate };
}

async function pings(url: string, n: number): Promise<number[]> {
  const ws = new WebSocket(`${url}/v1/ws`);
  await new Promise((r, j) => {
    ws.once('open', r);
    ws.once('error', j);
  });
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await new Promise<void>((r) => {
      ws.once('pong', () => r());
      ws.ping();
    });
    out.push(performance.now() - t0);
    await sleep(2);
  }
  ws.close();
  return out;
}

/** The peer for the round trip: a bare `ws` server in a child process, nothing behind it. */
async function bareServer(): Promise<{ url: string; stop(): void }> {
  const src =
    `import('ws').then(({ WebSocketServer }) => { const s = new WebSocketServer({ host: '127.0.0.1', port: 0 }); s.on('listening', () => ` +
    `console.log('port ' + s.address().port)); });`;
  const proc = spawn(process.execPath, ['-e', src], { stdio: ['ignore', 'pipe', 'ignore'], cwd: fileURLToPath(new URL('../..', import.meta.url)) });
  const port = await new Promise<number>((resolve, reject) => {
    proc.stdout!.on('data', (d: Buffer) => {
      const m = /port (\d+)/.exec(d.toString());
      if (m !== null) resolve(Number(m[1]));
    });
    proc.once('exit', (code) => reject(new Error(`bare ws server exited with ${code}`)));
  });
  return { url: `ws://127.0.0.1:${port}`, stop: () => proc.kill() };
}

export interface ServeBenchRow {
  checkpoint: string;
  roundTripIdleMs: { p50: number; p99: number };
  /** The same pings to a bare ws server in the same run, and the daemon's p50 over it. */
  roundTripBareMs: { p50: number; p99: number };
  roundTripDaemonOverBare: number;
  roundTripBusyMs: { p50: number; p99: number };
  firstAudioMs: { daemon: number; library: number; daemonOverLibrary: number };
  throughput: {
    oneDaemon: number;
    oneLibrary: number;
    oneDaemonOverLibrary: number;
    twoDaemon: number;
    twoLibrary: number;
    twoDaemonOverLibrary: number;
    twoOverOneDaemon: number;
  };
}

export async function run(o: { quick: boolean }): Promise<{ rows: ServeBenchRow[]; load: LoadResult }> {
  const speech = readMonoWav(FIXTURE);
  const names = o.quick ? ['tiny'] : ['tiny', 'small'];
  const rounds = o.quick ? 2 : 4;
  const rows: ServeBenchRow[] = [];
  for (const name of names) {
    const model = resolveModel(name, (l) => process.stderr.write(`${l}\n`));
    // The peer first, alone, so the two never share the machine.
    const engine = await loadEngine(model, { replySeconds: REPLY });
    const outputRate = engine.outputRate;
    const libFirst: number[] = [];
    for (let i = 0; i < rounds; i++) libFirst.push((await libraryTurn(engine, speech, true)).firstAudioMs);
    const libOne = await libraryTurn(engine, speech, false);
    const t2 = performance.now();
    const libTwo = await Promise.all([libraryTurn(engine, speech, false), libraryTurn(engine, speech, false)]);
    const libTwoWall = performance.now() - t2;
    await engine.close();

    const d = await spawnServe(['--model', model, '--port', '0', '--reply', String(REPLY)]);
    try {
      const idle = await pings(d.ws, o.quick ? 50 : 200);
      const bare = await bareServer();
      const bareTimes = await pings(bare.url, o.quick ? 50 : 200).finally(() => bare.stop());
      const first: number[] = [];
      for (let i = 0; i < rounds; i++) first.push((await socketTurn(d.ws, speech, true, outputRate)).firstAudioMs);
      const one = await socketTurn(d.ws, speech, false, outputRate);
      const t0 = performance.now();
      const [two, busy] = await Promise.all([
        Promise.all([socketTurn(d.ws, speech, false, outputRate), socketTurn(d.ws, speech, false, outputRate)]),
        sleep(50).then(() => pings(d.ws, o.quick ? 20 : 60)),
      ]);
      const twoWall = performance.now() - t0;
      const rate = (t: TurnTimes): number => round(t.audioSeconds / (t.wallMs / 1000), 2);
      const both = (ts: TurnTimes[], wall: number): number => round(ts.reduce((s, t) => s + t.audioSeconds, 0) / (wall / 1000), 2);
      const fd = median(first);
      const fl = median(libFirst);
      rows.push({
        checkpoint: name,
        roundTripIdleMs: quantiles(idle),
        roundTripBareMs: quantiles(bareTimes),
        roundTripDaemonOverBare: round(quantiles(idle).p50 / quantiles(bareTimes).p50, 2),
        roundTripBusyMs: quantiles(busy),
        firstAudioMs: { daemon: round(fd, 2), library: round(fl, 2), daemonOverLibrary: round(fd / fl, 2) },
        throughput: {
          oneDaemon: rate(one),
          oneLibrary: rate(libOne),
          oneDaemonOverLibrary: round(rate(one) / rate(libOne), 2),
          twoDaemon: both(two, twoWall),
          twoLibrary: both(libTwo, libTwoWall),
          twoDaemonOverLibrary: round(both(two, twoWall) / both(libTwo, libTwoWall), 2),
          twoOverOneDaemon: round(both(two, twoWall) / rate(one), 2),
        },
      });
    } finally {
      d.proc.kill('SIGTERM');
      await d.exited;
    }
  }
  // The load test on tiny with a compute capacity of four: a ramp past it and an abusive mix
  // beside a full house stay a few minutes long.
  const tiny = resolveModel('tiny', (l) => process.stderr.write(`${l}\n`));
  const load = await loadTest(tiny, { quick: o.quick, capacity: LOAD_CONVERSATIONS, outputRate: Number(defaultOf('outputRate')) });
  return { rows, load };
}

/** The load test's `--capacity`. */
const LOAD_CONVERSATIONS = 4;

export function format(r: Awaited<ReturnType<typeof run>>): string {
  const lines = [
    `serve (voxslab serve in a child process, loopback WebSocket, fixture hello.wav, reply ${REPLY} s); library = the same turns in-process, same run`,
  ];
  for (const x of r.rows) {
    lines.push(
      `${x.checkpoint}: WebSocket round trip p50 ${x.roundTripIdleMs.p50} / p99 ${x.roundTripIdleMs.p99} ms idle (a bare ws server: ` +
        `${x.roundTripBareMs.p50} / ${x.roundTripBareMs.p99}, ×${x.roundTripDaemonOverBare}), ${x.roundTripBusyMs.p50} / ${x.roundTripBusyMs.p99} ` +
        `ms with two conversations generating`,
      `  first reply sample after end of speech (device pace): ${x.firstAudioMs.daemon} ms daemon, ${x.firstAudioMs.library} ms library ` +
        `(×${x.firstAudioMs.daemonOverLibrary})`,
      `  throughput (reply audio s per wall s): one ${x.throughput.oneDaemon} daemon / ${x.throughput.oneLibrary} library ` +
        `(×${x.throughput.oneDaemonOverLibrary}); two at once ${x.throughput.twoDaemon} / ${x.throughput.twoLibrary} ` +
        `(×${x.throughput.twoDaemonOverLibrary}; ×${x.throughput.twoOverOneDaemon} of one)`,
    );
  }
  lines.push(...formatLoad(r.load));
  return lines.join('\n');
}
