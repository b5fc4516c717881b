/**
 * `bench serve`'s load test: `voxslab serve` in one child process, its clients in another
 * (workers/load-client.ts), this process watching the daemon from outside (/v1/memory, /metrics).
 *
 * 1. One client alone: its first-audio latency is the baseline.
 * 2. A ramp: a well-behaved client every `rampMs` up to two past the daemon's compute capacity
 *    (`--capacity`; its `--max-conversations` above it, so admission by compute refuses them),
 *    all speaking at device pace until the end: the conversations admitted, the refusals (503
 *    with Retry-After), conversations lost after admission, first audio p50/p99 over the
 *    baseline, the admitted ones' underruns, the daemon's RSS beside the ledger, its runtimes and
 *    the residual, and its event-loop delay.
 * 3. The abusive mix: on a daemon with room for three more, the same well-behaved clients beside a
 *    flood, a non-reader, slow-loris upgrades and garbage frames (a second client process): the
 *    well-behaved figures beside the ramp's, and the daemon's RSS growth over its idle RSS.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { spawnServe, type ServeChild } from '../src/daemon/child.js';
import { corpusTools, SENTENCES, utterance, VOICES } from './corpus.js';
import { readMonoWav } from '../src/io/files.js';
import { resampleSignal } from '../src/dsp/resample.js';
import { quantiles, round } from './util.js';
import type { ClientReport, LoadPlan, LoadReport } from './workers/load-client.js';

const CLIENT = fileURLToPath(new URL('./workers/load-client.js', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../../test/fixtures/hello.wav', import.meta.url));
const MIB = 2 ** 20;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface Quantiles {
  p50: number;
  p99: number;
}

export interface LoadResult {
  /** The daemon's compute capacity (`--capacity`), and the conversations it admitted in the ramp. */
  capacityOption: number;
  capacity: number;
  /** Attempts past the capacity refused with 503, and how many of those said Retry-After. */
  refused: number;
  refusedWithRetryAfter: number;
  /** The daemon's reasons for those refusals, each once. */
  refusals: string[];
  /** Conversations closed or failed after admission. */
  lost: number;
  turns: number;
  firstAudioMs: { solo: Quantiles; atCapacity: Quantiles; p99OverSolo: number };
  underrunMs: number;
  /** The daemon at its fullest: RSS, the ledger's bytes (held, and resident), the runtimes', mapped files', the C heap's, and what none explains. */
  rssMiB: number;
  accountedMiB: number;
  ledgerResidentMiB: number;
  runtimeMiB: number;
  filesMiB: number;
  cHeapMiB: number;
  residualMiB: number;
  residualShareOfRss: number;
  eventLoopDelayMs: { p50: number; p99: number; max: number };
  abusive: {
    clients: number;
    firstAudioMs: Quantiles;
    p99OverClean: number;
    underrunMs: number;
    lost: number;
    abusers: { kind: string; outcome: string }[];
    /** The daemon's log lines on closing sockets, by reason (each closed socket is one line, or a summary). */
    closeLines: number;
    idleRssMiB: number;
    peakRssMiB: number;
  };
}

/** Speech for the clients, 16 kHz: the labelled corpus's sentences when espeak-ng is here, else the fixture. */
function speech(): Float32Array[] {
  if (corpusTools()) return SENTENCES.slice(0, 4).map((s, i) => utterance(s, VOICES[i % VOICES.length]!, 165));
  const w = readMonoWav(FIXTURE);
  return [w.rate === 16000 ? w.samples : resampleSignal(w.samples, w.rate, 16000)];
}

function runClients(plan: LoadPlan): Promise<LoadReport> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [CLIENT], { stdio: ['pipe', 'pipe', 'pipe'] });
    p.stdin.end(JSON.stringify(plan));
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.once('exit', (code) => {
      if (code === 0) resolve(JSON.parse(out) as LoadReport);
      else reject(new Error(`load client exited with ${code}: ${err.trim().slice(0, 500)}`));
    });
  });
}

interface MemorySample {
  conversations: number;
  rss: number;
  ledger: number;
  ledgerResident: number;
  runtime: number;
  files: number;
  cHeap: number;
  residual: number;
}

/** Samples the daemon's /v1/memory every 500 ms until `stop` resolves. */
async function watchMemory(d: ServeChild, stop: Promise<unknown>): Promise<MemorySample[]> {
  const samples: MemorySample[] = [];
  let done = false;
  void stop.finally(() => {
    done = true;
  });
  while (!done) {
    try {
      const m = (await (await fetch(`${d.url}/v1/memory`)).json()) as {
        totals: { current: number };
        runtime: { rss: number; runtime: number; files: number; cHeap: number; ledgerResident: number; residual: number };
      };
      const c = (await (await fetch(`${d.url}/v1/conversations`)).json()) as { conversations: unknown[] };
      // The ledger's bytes are its held bytes; what of them is resident is the runtime split's.
      const r = m.runtime;
      samples.push({
        conversations: c.conversations.length,
        rss: r.rss,
        ledger: m.totals.current,
        ledgerResident: r.ledgerResident,
        runtime: r.runtime,
        files: r.files,
        cHeap: r.cHeap,
        residual: r.residual,
      });
    } catch {
      // The daemon is busy or closing: the next sample.
    }
    await sleep(500);
  }
  return samples;
}

/** The event-loop delay since the previous scrape (the scrape resets it), ms. */
async function eventLoop(d: ServeChild): Promise<{ p50: number; p99: number; max: number }> {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  const q = (k: string): number =>
    round(Number(new RegExp(`voxslab_event_loop_delay_seconds\\{quantile="${k}"\\} ([0-9.e+-]+)`).exec(text)?.[1] ?? 0) * 1000, 2);
  return { p50: q('0.5'), p99: q('0.99'), max: q('1') };
}

const firsts = (cs: ClientReport[]): number[] => cs.flatMap((c) => c.firstAudioMs);

export async function loadTest(model: string, o: { quick: boolean; capacity: number; outputRate: number }): Promise<LoadResult> {
  const utterances = speech().map((x) => Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString('base64'));
  const hold = o.quick ? 12_000 : 40_000;
  const rampMs = 2000;
  const m = o.capacity;
  const base = { utterances, outputRate: o.outputRate, floods: 0, nonReaders: 0, slowLoris: 0, garbage: 0 };
  const args = (cap: number): string[] => [
    '--model',
    model,
    '--port',
    '0',
    '--reply',
    '4',
    '--stall-limit',
    '5',
    '--capacity',
    String(cap),
    '--max-conversations',
    String(cap + 4),
  ];

  const d = await spawnServe(args(m));
  let solo: LoadReport;
  let ramp: LoadReport;
  let samples: MemorySample[];
  let delay: { p50: number; p99: number; max: number };
  try {
    // A first turn warms the daemon (code compiled, weights paged in): not counted.
    await runClients({ ...base, url: d.ws, clients: 1, rampMs, untilMs: 1000 });
    solo = await runClients({ ...base, url: d.ws, clients: 1, rampMs, untilMs: hold });
    await eventLoop(d); // resets the window: the ramp's delay alone below
    const clients = runClients({ ...base, url: d.ws, clients: m + 2, rampMs, untilMs: (m + 2) * rampMs + hold });
    samples = await watchMemory(d, clients);
    ramp = await clients;
    delay = await eventLoop(d);
  } finally {
    d.proc.kill('SIGTERM');
    await d.exited;
  }

  // The abusive mix: room for the abusers' three conversations beside the same well-behaved clients.
  const a = await spawnServe(args(m + 3));
  let abused: LoadReport;
  let abusedSamples: MemorySample[];
  let idle: number;
  let closeLines: number;
  try {
    await sleep(1000);
    idle = ((await (await fetch(`${a.url}/v1/memory`)).json()) as { runtime: { rss: number } }).runtime.rss;
    const clients = runClients({ ...base, url: a.ws, clients: m, rampMs: 500, untilMs: m * 500 + hold, floods: 1, nonReaders: 1, slowLoris: 2, garbage: 1 });
    abusedSamples = await watchMemory(a, clients);
    abused = await clients;
    closeLines = a
      .stderr()
      .split('\n')
      .filter((l) => l.includes('closing its socket')).length;
  } finally {
    a.proc.kill('SIGTERM');
    await a.exited;
  }

  const admitted = ramp.clients.filter((c) => c.admitted);
  const refused = ramp.clients.filter((c) => !c.admitted && c.status === 503);
  const full = samples.reduce(
    (best, s) => (s.conversations > best.conversations || (s.conversations === best.conversations && s.rss > best.rss) ? s : best),
    samples[0]!,
  );
  const soloQ = quantiles(firsts(solo.clients));
  const capQ = quantiles(firsts(admitted));
  const abusedQ = quantiles(firsts(abused.clients.filter((c) => c.admitted)));
  return {
    capacityOption: m,
    capacity: admitted.length,
    refused: refused.length,
    refusedWithRetryAfter: refused.filter((c) => c.retryAfter !== null).length,
    refusals: [...new Set(refused.map((c) => c.refusal ?? ''))],
    lost: admitted.filter((c) => c.lost !== null).length,
    turns: admitted.reduce((n, c) => n + c.turns, 0),
    firstAudioMs: { solo: soloQ, atCapacity: capQ, p99OverSolo: round(capQ.p99 / soloQ.p99, 2) },
    underrunMs: round(
      admitted.reduce((n, c) => n + c.underrunMs, 0),
      1,
    ),
    rssMiB: round(full.rss / MIB, 1),
    accountedMiB: round(full.ledger / MIB, 1),
    ledgerResidentMiB: round(full.ledgerResident / MIB, 1),
    runtimeMiB: round(full.runtime / MIB, 1),
    filesMiB: round(full.files / MIB, 1),
    cHeapMiB: round(full.cHeap / MIB, 1),
    residualMiB: round(full.residual / MIB, 1),
    residualShareOfRss: round(full.residual / full.rss, 3),
    eventLoopDelayMs: delay,
    abusive: {
      clients: abused.clients.filter((c) => c.admitted).length,
      firstAudioMs: abusedQ,
      p99OverClean: round(abusedQ.p99 / capQ.p99, 2),
      underrunMs: round(
        abused.clients.reduce((n, c) => n + c.underrunMs, 0),
        1,
      ),
      lost: abused.clients.filter((c) => c.admitted && c.lost !== null).length,
      abusers: abused.abusers,
      closeLines,
      idleRssMiB: round(idle / MIB, 1),
      peakRssMiB: round(Math.max(idle, ...abusedSamples.map((s) => s.rss)) / MIB, 1),
    },
  };
}

export function formatLoad(l: LoadResult): string[] {
  return [
    `  load (clients in their own process, device pace): ${l.capacity} admitted of --capacity ${l.capacityOption}; ` +
      `${l.refused} refused with 503 (${l.refusedWithRetryAfter} with Retry-After); ${l.lost} lost after admission; ${l.turns} turns`,
    `    first audio p50 / p99: ${l.firstAudioMs.solo.p50} / ${l.firstAudioMs.solo.p99} ms alone, ${l.firstAudioMs.atCapacity.p50} / ` +
      `${l.firstAudioMs.atCapacity.p99} ms at capacity (p99 ×${l.firstAudioMs.p99OverSolo}); underruns ${l.underrunMs} ms`,
    `    at capacity: RSS ${l.rssMiB} MiB = the ledger's resident ${l.ledgerResidentMiB} (of ${l.accountedMiB} accounted) + runtimes ${l.runtimeMiB} + files ${l.filesMiB} + C heap ${l.cHeapMiB} + residual ` +
      `${l.residualMiB} (${round(100 * l.residualShareOfRss, 1)} % of RSS); event-loop delay p50 ${l.eventLoopDelayMs.p50}, p99 ` +
      `${l.eventLoopDelayMs.p99}, max ${l.eventLoopDelayMs.max} ms`,
    `    abusive mix: ${l.abusive.clients} well-behaved clients, first audio p50 / p99 ${l.abusive.firstAudioMs.p50} / ` +
      `${l.abusive.firstAudioMs.p99} ms (p99 ×${l.abusive.p99OverClean} of the clean ramp), underruns ${l.abusive.underrunMs} ms, ` +
      `${l.abusive.lost} lost; RSS ${l.abusive.idleRssMiB} MiB idle, ${l.abusive.peakRssMiB} at most; ${l.abusive.closeLines} log lines on closed sockets`,
    ...l.abusive.abusers.map((x) => `      ${x.kind}: ${x.outcome}`),
  ];
}
