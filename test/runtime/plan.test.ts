// `voxslab plan` runs the pipeline's own constructors over a planning domain: its manifest must
// be what a real pipeline carves, owner by owner and category by category, to the byte.
import t, { type Test } from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { loadConfig } from '../../src/io/config.js';
import { encodeWav } from '../../src/dsp/wav.js';
import { runCommand } from '../../src/cli/run.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { planPipeline, type PipelinePlanOptions } from '../../src/runtime/plan.js';
import { PIPELINE } from '../../src/runtime/stages/index.js';
import { scratchDir } from '../helpers.js';

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-plan-');
const quiet = (): void => undefined;
// A second input at 22,050 Hz (its capture resampler differs from the 16 kHz fixture's).
const other = join(work, 'other.wav');
const secs = 0.8;
writeFileSync(
  other,
  encodeWav(
    { sampleRate: 22050, channels: 1, format: 'pcm16', extensible: false },
    Float32Array.from({ length: Math.floor(22050 * secs) }, (_, i) => 0.3 * Math.sin(i / 9)),
  ),
);

interface Owner {
  held: number;
  borrowers: string[];
  categories: Record<string, { requested: number; footprint: number; regions: number }>;
}
interface Manifest {
  owners: Record<string, Owner>;
  totals: { slab: number; native: number; virtualAlias: number };
}
const view = (m: Manifest) =>
  Object.fromEntries(Object.entries(m.owners).map(([k, o]) => [k, { held: o.held, borrowers: o.borrowers, categories: o.categories }]));

async function compare(
  t: Test,
  model: string,
  inputs: string[],
  rates: number[],
  extra: { reply: string; kv?: 'f16'; slots?: string },
): Promise<{ live: Manifest; report: { pipeline: { captureRing: string } } }> {
  const rep = join(work, 'report.json');
  const domain = MemoryDomain.create();
  await runCommand(
    {
      model,
      inputs,
      outputs: inputs.map((_, i) => join(work, `out${i}.wav`)),
      reply: extra.reply,
      report: rep,
      ...(extra.kv === undefined ? {} : { kv: extra.kv }),
      ...(extra.slots === undefined ? {} : { slots: extra.slots }),
      hooks: { domain },
    },
    quiet,
  );
  const report = JSON.parse(readFileSync(rep, 'utf8')) as { manifest: Manifest; pipeline: { captureRing: string } };
  const live = report.manifest;
  const o: PipelinePlanOptions = { conversations: inputs.length, inputRate: rates, replySeconds: Number(extra.reply) };
  if (extra.kv !== undefined) o.kv = extra.kv;
  if (extra.slots !== undefined) o.slots = Number(extra.slots);
  const planned = planPipeline({ dir: model }, o).manifest as unknown as Manifest;
  t.same(view(planned), view(live), 'every owner: held bytes, borrowers, and each category (requested, footprint, regions)');
  t.same(
    live.owners['model/0']!.borrowers,
    inputs.map((_, i) => `conversation/${i}`),
    'the conversations borrow the model’s storage (charged once)',
  );
  // A negative control: a plan for a longer reply carves the detokenizer's tables longer.
  const longer = planPipeline({ dir: model }, { ...o, replySeconds: Number(extra.reply) + 1 }).manifest as unknown as Manifest;
  t.notSame(view(longer), view(live), 'a plan for other options differs');
  t.equal(planned.totals.slab, live.totals.slab, `slab total ${live.totals.slab} bytes`);
  t.equal(planned.totals.native, live.totals.native);
  t.equal(planned.totals.virtualAlias, live.totals.virtualAlias, `virtual alias ${live.totals.virtualAlias} bytes`);
  t.equal(domain.snapshot().held.total, 0, 'the live pipeline gave every byte back');
  t.equal(domain.snapshot().virtualAlias, 0, 'and its virtual alias bytes');
  t.same(domain.manifest({ measureResident: false }).owners['model/0']?.borrowers ?? [], [], 'and its conversations no longer borrow');
  return { live, report };
}

const linux = process.platform === 'linux';

t.test('tiny: two conversations at 16 and 22.05 kHz: plan = the pipeline’s manifest', async (t) => {
  const model = join(work, 'tiny');
  makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
  // Asked for, the capture ring copies across its end, and the report says so.
  process.env.VOXSLAB_CAPTURE_MIRROR = 'off';
  try {
    const plain = await compare(t, model, [fixture, other], [16000, 22050], { reply: '1' });
    t.equal(plain.report.pipeline.captureRing, 'copy-on-wrap', 'the report says copy-on-wrap');
    t.equal(plain.live.totals.virtualAlias, 0, 'no virtual alias');
    t.equal(plain.live.owners['session/0']!.categories.ring!.regions, 7, 'seven rings, data and all, in the arena');
  } finally {
    delete process.env.VOXSLAB_CAPTURE_MIRROR;
  }
  await compare(t, model, [other], [22050], { reply: '2', kv: 'f16', slots: '3' });
  if (!linux) return;
  // Mirrored (the default on Linux): the capture ring's data is a mapping, its pages charged once, the alias reported.
  const { live, report } = await compare(t, model, [fixture, other], [16000, 22050], { reply: '1' });
  const input = PIPELINE.capacities(loadConfig('tiny'), 24000).input!;
  t.equal(report.pipeline.captureRing, 'mirrored', 'the capture rings are mirrored');
  t.equal(live.totals.virtualAlias, 2 * 4 * input, `virtual alias: two capture rings of ${4 * input} bytes`);
  t.equal(live.owners['session/0']!.categories.ring!.regions, 7 + 1, 'session/0: seven ring headers and one mapping in category ring');
});

t.test('small (bf16 weights): plan = the pipeline’s manifest', async (t) => {
  const model = join(work, 'small');
  makeCheckpoint({ config: 'small', seed: 4, out: model, dtype: 'bf16' });
  await compare(t, model, [other], [22050], { reply: '1' });
});

t.test('a configuration plans without a checkpoint: the same bytes as its synthetic checkpoint', async (t) => {
  const model = join(work, 'tiny-plan');
  makeCheckpoint({ config: 'tiny', seed: 9, out: model, dtype: 'f16' });
  const a = planPipeline({ dir: model }, { conversations: 2 }).manifest as unknown as Manifest;
  const b = planPipeline({ config: loadConfig('tiny'), dtype: 'f16' }, { conversations: 2 }).manifest as unknown as Manifest;
  t.same(view(a), view(b));
  const big = planPipeline({ config: loadConfig('lfm2-audio-1.5b'), dtype: 'bf16' }, { conversations: 2 }).manifest as unknown as Manifest;
  t.ok(big.owners['conversation/1'] !== undefined && big.totals.slab > 3e9, `lfm2-audio-1.5b, two conversations: ${big.totals.slab} bytes planned`);
  t.throws(() => planPipeline({ config: loadConfig('tiny'), dtype: 'f32' }, { conversations: 2, inputRate: [16000] }), /2 conversation/);
});
