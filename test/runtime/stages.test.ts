// Each stage's poll — the code its worker runs after readiness — driven through real rings in a
// worker thread of its own (one stage per thread, as in the pipeline): once V8 has optimised
// it, a record in and its records out leave nothing on the JS heap and no ArrayBuffer behind.
import t from 'tap';
import { apmAvailable } from '../../src/dsp/aec.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { PIPELINE } from '../../src/runtime/stages/index.js';

const STAGE_NAMES = PIPELINE.names;
import { runWorker, scratchDir } from '../helpers.js';

const dir = scratchDir('voxslab-stages-');
makeCheckpoint({ config: 'tiny', seed: 61, out: dir, dtype: 'f32' });
const probe = new URL('./workers/stage-probe.js', import.meta.url);

interface Probe {
  heap: number;
  arrayBuffers: number;
  windows: number;
  records: number;
  kinds: Record<string, number>;
  attempts: number[];
}

/**
 * Up to three attempts, each a fresh worker: one-off compilation work lands in some attempts
 * only, an allocation written in the code in every attempt.
 */
async function probeStage(data: { stage: string; vad?: boolean; echo?: boolean }): Promise<Probe> {
  const attempts: number[] = [];
  let p = { heap: Number.POSITIVE_INFINITY, arrayBuffers: 0, windows: 0, records: 0, kinds: {} as Record<string, number> };
  for (let k = 0; k < 3 && !(p.heap >= 0 && p.heap < 1024); k++) {
    p = await runWorker<typeof p>(probe, { dir, ...data });
    attempts.push(p.heap);
  }
  return { ...p, attempts };
}

for (const stage of STAGE_NAMES) {
  t.test(`${stage}: a record through its poll allocates nothing in steady state`, async (t) => {
    const p = await probeStage({ stage });
    t.ok(
      p.heap >= 0 && p.heap < 1024,
      `JS heap growth over a window: ${p.heap} bytes (window ${p.windows}; the probe's own reads are ~600; attempts: ${p.attempts.join(', ')})`,
    );
    t.ok(p.arrayBuffers <= 0, `no ArrayBuffer growth (${p.arrayBuffers} bytes)`);
    t.ok(p.records > 0, `${p.records} records handled`);
  });
}

const skip = apmAvailable() ? false : 'no WebRTC audio processing';

// The frontend in VAD mode: the WebRTC VAD and the endpointer, turns starting, ending, dropped.
t.test('frontend with VAD: a record through its poll allocates nothing in steady state', { skip }, async (t) => {
  const p = await probeStage({ stage: 'frontend', vad: true });
  t.ok(p.heap >= 0 && p.heap < 1024, `JS heap growth over a window: ${p.heap} bytes (attempts: ${p.attempts.join(', ')})`);
  t.ok(p.arrayBuffers <= 0, `no ArrayBuffer growth (${p.arrayBuffers} bytes)`);
  t.ok(
    (p.kinds.speechStart ?? 0) > 0 && (p.kinds.endSegment ?? 0) > 0 && (p.kinds.discard ?? 0) > 0,
    `turns started, ended and dropped: ${JSON.stringify(p.kinds)}`,
  );
});

// The capture stage with echo cancellation: [microphone | far end] records through WebRTC's canceller.
t.test('capture with echo cancellation: a record through its poll allocates nothing in steady state', { skip }, async (t) => {
  const p = await probeStage({ stage: 'capture', echo: true });
  t.ok(p.heap >= 0 && p.heap < 1024, `JS heap growth over a window: ${p.heap} bytes (attempts: ${p.attempts.join(', ')})`);
  t.ok(p.arrayBuffers <= 0, `no ArrayBuffer growth (${p.arrayBuffers} bytes)`);
  t.ok(p.records > 0 && (p.kinds.pcm ?? 0) + (p.kinds.echo ?? 0) > 0, `${p.records} records handled, cleaned audio out (${JSON.stringify(p.kinds)})`);
});
