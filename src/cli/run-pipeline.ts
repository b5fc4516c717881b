import { basename } from 'node:path';
import type { MemoryDomain } from '../memory/domain.js';
import { WavFileWriter } from '../io/files.js';
import { CLOCKS, threadCpuMs } from '../core/clock.js';
import { ConversationPort, OUT_NONE, OUT_REPLY_END } from '../runtime/port.js';
import { Pipeline, type PipelineConversation } from '../runtime/coordinator.js';
import { BELL_MAIN, readTurnFields } from '../runtime/protocol.js';
import { helperText, type Job, ms, type TurnRecord, turnResult, writeReport, YIELD_MS } from './run-report.js';

export interface PipelineRun {
  dir: string;
  domain: MemoryDomain;
  options: Parameters<typeof Pipeline.start>[2];
  jobs: Job[];
  rate: number;
  seed: number;
  segment: number;
  report: string | undefined;
  realtime: boolean;
  t0: number;
  log: (line: string) => void;
}

/** One conversation's file ends as the main thread drives them. */
interface Flow {
  job: Job;
  conv: PipelineConversation;
  port: ConversationPort;
  chunk: Float32Array;
  pending: number; // samples read, not yet in the ring
  fed: number; // samples in the ring
  eof: boolean;
  ended: boolean; // end of segment sent
  endAt: number; // when it was sent (ms)
  firstAudioAt: number; // first reply samples received (ms), -1 = none yet
  writer: WavFileWriter | null;
  tokens: number[];
  /** Every frame's codes, one after the other (kept for --report only). */
  codes: number[];
  samples: number;
  done: boolean;
  arrivals: number[]; // when each block of reply samples reached this thread (ms)
  lateMs: number; // the longest a player started at the first sample would have starved
}

/** Flat codes as one row of `per` codes per frame. */
function frames(flat: readonly number[], per: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < flat.length; i += per) out.push(flat.slice(i, i + per));
  return out;
}

/** p50, p99 and max of the gaps between consecutive arrivals, ms. */
function gaps(times: number[]): { p50: number; p99: number; max: number } | null {
  if (times.length < 2) return null;
  const d = times
    .slice(1)
    .map((t, i) => t - times[i]!)
    .sort((a, b) => a - b);
  const at = (q: number) => ms(d[Math.min(d.length - 1, Math.floor(q * d.length))]!);
  return { p50: at(0.5), p99: at(0.99), max: ms(d[d.length - 1]!) };
}

export async function runPipeline(p: PipelineRun): Promise<string> {
  const pipeline = await Pipeline.start(p.dir, p.domain, p.options);
  try {
    const flows: Flow[] = [];
    for (const [i, job] of p.jobs.entries()) {
      const conv = await pipeline.open({ seed: p.seed + i, inputRate: job.reader.info.sampleRate });
      const tokens: number[] = [];
      const codes: number[] = [];
      const port = new ConversationPort(pipeline, conv, {
        text: (token) => tokens.push(token),
        // Flat and only when reported: what the main thread keeps per frame bounds a long reply's memory.
        frame: (frame) => {
          if (p.report !== undefined) for (const code of frame) codes.push(code);
        },
      });
      flows.push({
        job,
        conv,
        port,
        chunk: new Float32Array(conv.chunk),
        pending: 0,
        fed: 0,
        eof: false,
        ended: false,
        endAt: 0,
        firstAudioAt: -1,
        writer: null,
        tokens,
        codes,
        samples: 0,
        done: false,
        arrivals: [],
        lateMs: 0,
      });
    }
    await pipeline.ready();
    const loadMs = performance.now() - p.t0;
    const atReadiness = p.domain.snapshot().allocations;
    const c = pipeline.config;
    const pcm = new Float32Array(Math.max(...flows.map((f) => f.conv.output.maxPayload)));
    for (const f of flows)
      f.writer = new WavFileWriter(f.job.staging, { sampleRate: p.rate, channels: 1, format: 'float32', extensible: false }, { shown: f.job.output });
    const started = performance.now();
    const mainCpuAtStart = threadCpuMs();
    let mainSleepCpuMs = 0;
    let yielded = performance.now();
    try {
      for (;;) {
        if (pipeline.failure !== null) throw pipeline.failure;
        const seen = pipeline.bells.read(BELL_MAIN);
        let progress = false;
        let open = 0;
        let nextDue = Number.POSITIVE_INFINITY;
        for (const f of flows) {
          const conv = f.conv;
          const now = performance.now() - started;
          // Feed the input (at device pace with --realtime).
          while (!f.ended) {
            if (f.pending === 0 && !f.eof) {
              if (p.realtime) {
                const due = (1000 * f.fed) / conv.inputRate;
                if (due > now) {
                  nextDue = Math.min(nextDue, due - now);
                  break;
                }
              }
              f.pending = f.job.reader.readMono(f.chunk, f.chunk.length);
              if (f.pending === 0) f.eof = true;
            }
            if (f.pending > 0) {
              if (!f.port.writePcm(f.chunk, 0, f.pending)) break;
              f.fed += f.pending;
              f.pending = 0;
            } else if (f.eof) {
              if (p.realtime && (1000 * f.fed) / conv.inputRate > now) {
                nextDue = Math.min(nextDue, (1000 * f.fed) / conv.inputRate - now);
                break;
              }
              if (!f.port.endSegment()) break;
              f.ended = true;
              f.endAt = performance.now();
            }
            progress = true;
          }
          if (f.port.events()) progress = true;
          // Reply samples.
          for (let n = f.port.readOutput(pcm); n !== OUT_NONE; n = f.port.readOutput(pcm)) {
            progress = true;
            if (n === OUT_REPLY_END) {
              f.port.endReply();
              f.done = true;
            }
            if (n <= 0) continue;
            const now = performance.now();
            if (f.firstAudioAt < 0) f.firstAudioAt = now;
            f.arrivals.push(now);
            // A player that began at the first sample has played this much by now.
            f.lateMs = Math.max(f.lateMs, now - f.firstAudioAt - (1000 * f.samples) / p.rate);
            f.writer!.write(pcm.subarray(0, n));
            f.samples += n;
          }
          if (!f.done) open++;
        }
        if (open === 0) break;
        if (!progress) {
          // This thread runs nothing but this loop, so it blocks: a blocking wait costs it less per
          // wake-up than an asynchronous one. Records, room and a worker's failure all ring it, but a
          // failure is noticed on the event loop, which it lets in at least every YIELD_MS.
          const before = threadCpuMs();
          if (performance.now() - yielded >= YIELD_MS) {
            await new Promise<void>((resolve) => setImmediate(resolve));
            yielded = performance.now();
          }
          if (pipeline.failure === null) pipeline.block(seen, Math.min(YIELD_MS, Math.max(1, nextDue)));
          mainSleepCpuMs += threadCpuMs() - before;
        }
      }
    } finally {
      for (const f of flows) f.writer?.close();
    }
    const wallMs = performance.now() - started;
    // The main thread's CPU while it fed the input and took the reply: ring copies and WAV I/O.
    const mainCpuMs = mainCpuAtStart < 0 ? -1 : ms(threadCpuMs() - mainCpuAtStart);
    mainSleepCpuMs = mainCpuAtStart < 0 ? -1 : ms(mainSleepCpuMs);
    const stats = await pipeline.stats();
    const atEnd = p.domain.snapshot().allocations;
    const lines: string[] = [];
    const results: Record<string, unknown>[] = [];
    for (const [i, f] of flows.entries()) {
      const s = f.port.summary;
      const text = pipeline.tokenizer.decode(f.tokens);
      const timings: Record<string, { ms: number; count: number }> = {};
      for (const name of CLOCKS) timings[name] = { ms: 0, count: 0 };
      for (const st of stats) {
        for (const [name, t] of Object.entries(st.clocks[i] ?? {})) {
          const acc = timings[name]!;
          acc.ms = ms(acc.ms + t.ms);
          acc.count += t.count;
        }
      }
      const audioSeconds = f.samples / p.rate;
      const tf = readTurnFields(s);
      const stop = tf.stop;
      const turn: TurnRecord = {
        job: f.job,
        rate: p.rate,
        seed: p.seed + i,
        encoderFrames: tf.userFrames,
        text,
        tokens: f.tokens,
        codes: frames(f.codes, c.audio.codebooks),
        audioFrames: tf.frames,
        samples: f.samples,
        stop,
        endOfAudio: tf.endOfAudio,
        positions: tf.positions,
        compactions: tf.compactions,
        droppedPositions: tf.droppedPositions,
        timings,
        wallMs,
      };
      results.push(
        turnResult(turn, {
          firstAudioMs: f.firstAudioAt < 0 ? null : ms(f.firstAudioAt - f.endAt),
          // Gaps between blocks of reply samples (one per audio frame) as they reached the main thread.
          frameIntervalMs: gaps(f.arrivals),
          // The longest a player started at the first reply sample would have waited for the next (0 = never starved).
          underrunMs: ms(f.lateMs),
        }),
      );
      lines.push(`${basename(f.job.input)} → ${f.job.output}: ${JSON.stringify(text)}`);
      p.log(
        `${f.job.output}: ${audioSeconds.toFixed(2)} s at ${p.rate} Hz, ${tf.frames} audio frames, ${f.tokens.length} text tokens, stop: ${stop}, ` +
          `first audio ${f.firstAudioAt < 0 ? '-' : `${(f.firstAudioAt - f.endAt).toFixed(1)} ms`} after the end of speech`,
      );
    }
    // The capture ring: mirrored (a window never wraps) or copied where it wraps.
    const captureRing = flows.every((f) => f.conv.mirror !== null) ? 'mirrored' : 'copy-on-wrap';
    p.log(
      `pipeline: ${flows.length} conversation(s) in ${(wallMs / 1000).toFixed(2)} s wall; capture ring ${captureRing}; ` +
        `${pipeline.placement.map((w) => `${w.stage}@${w.affinity.join('+')}${helperText(w.helpers)}${w.pinError === null ? '' : ` (pin failed: ${w.pinError})`}${w.threadsError === null ? '' : ` (${w.threadsError})`}`).join(', ')}`,
    );
    if (p.report !== undefined) {
      const rings = flows.map(({ conv: v }) =>
        Object.fromEntries(Object.entries(v.rings).map(([n, r]) => [n, { capacity: r.capacity, maxUsed: r.maxUsed, records: r.records }])),
      );
      writeReport(
        p.report,
        {
          dir: p.dir,
          config: c.name,
          weightBytes: pipeline.report.weightBytes,
          options: pipeline.setup.options,
          loadMs,
          results,
          atReadiness,
          atEnd,
          manifest: p.domain.manifest(),
        },
        {
          engine: 'pipeline',
          pipeline: { slots: pipeline.slots, placement: pipeline.placement, captureRing, mainCpuMs, mainSleepCpuMs, stages: stats, rings },
        },
      );
    }
    return lines.join('\n');
  } finally {
    await pipeline.close();
  }
}
