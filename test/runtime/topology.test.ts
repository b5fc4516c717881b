// The stage registry: the five stages' derived tables (doorbells, rings and their ends, control
// block, placement), the checks on a spec list, and a sixth stage added by its spec and file
// alone, run through a real pipeline: the conversation it carries is the same bytes.
import t from 'tap';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { openFileSource } from '../../src/io/files.js';
import { WavReader } from '../../src/dsp/wav.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { Pipeline } from '../../src/runtime/coordinator.js';
import { ConversationPort, OUT_NONE, OUT_REPLY_END } from '../../src/runtime/port.js';
import { BELL_MAIN } from '../../src/runtime/protocol.js';
import { PIPELINE, PIPELINE_STAGES } from '../../src/runtime/stages/index.js';
import { Topology, type StageSpec } from '../../src/runtime/topology.js';
import { stage as tap } from './stages/tap.js';
import { scratchDir } from '../helpers.js';

t.test('the five stages: bells in pipeline order, seven rings with their ends, the control block of 24 words', async (t) => {
  t.same(PIPELINE.names, ['capture', 'frontend', 'conformer', 'depthformer', 'playback']);
  t.same(
    PIPELINE.names.map((n) => PIPELINE.bell(n)),
    [1, 2, 3, 4, 5],
  );
  t.same(
    PIPELINE.rings.map((r) => [r.name, r.producer, r.consumer]),
    [
      ['input', BELL_MAIN, 1],
      ['pcm16', 1, 2],
      ['mel', 2, 3],
      ['embed', 3, 4],
      ['codes', 4, 5],
      ['events', 4, BELL_MAIN],
      ['output', 5, BELL_MAIN],
    ],
  );
  t.same(PIPELINE.layout, { attention: 8, stop: 16, idle: 17, words: 24 });
  t.same(PIPELINE.mainWrites, { input: 'input' });
  t.same(PIPELINE.mainReads, { events: 'events', output: 'output' });
  t.same(PIPELINE.compute, ['conformer', 'depthformer', 'playback']);
  t.same(PIPELINE.ends('depthformer'), { reads: { embed: 'embed' }, writes: { codes: 'codes', events: 'events' } });
});

t.test('the default placement follows the pin priorities', async (t) => {
  t.same(PIPELINE.pinMap([0, 1]), { depthformer: [1], playback: [0], conformer: [0], frontend: [0], capture: [0] });
  t.same(PIPELINE.pinMap([4, 5, 6, 7]), { depthformer: [7], playback: [6], conformer: [5], frontend: [4], capture: [4] });
  t.same(PIPELINE.pinMap([0, 1, 2, 3, 4, 5]), { capture: [0], frontend: [1], conformer: [2], depthformer: [3], playback: [4] });
  t.same(PIPELINE.pinMap([0, 1], { depthformer: 2 }).depthformer, [0, 1], 'a stage with two threads spans the CPUs');
  t.same(PIPELINE.pinMap([0, 1], { frontend: 2 }).frontend, [0], 'a light stage does not');
  t.same(PIPELINE.pinMap([]), {});
  t.same(PIPELINE.threads(2), { capture: 1, frontend: 1, conformer: 2, depthformer: 2, playback: 1 }, 'threads go to the heavy stages');
  t.same(
    PIPELINE.threads(2, { playback: 3, depthformer: 1 }),
    { capture: 1, frontend: 1, conformer: 2, depthformer: 1, playback: 3 },
    'named stages keep theirs',
  );
  t.same(
    PIPELINE.pinMap([0, 1], PIPELINE.threads(2)),
    { depthformer: [0, 1], playback: [0], conformer: [0, 1], frontend: [0], capture: [0] },
    'the default on two CPUs: both heavy stages on both, the light ones on the first',
  );
});

t.test('a stage spliced into a ring gets the ring after it; the control block grows with the stages', async (t) => {
  const six = new Topology([...PIPELINE_STAGES.slice(0, 3), tap, ...PIPELINE_STAGES.slice(3)]);
  t.same(six.names, ['capture', 'frontend', 'conformer', 'tap', 'depthformer', 'playback']);
  t.same(six.ends('tap'), { reads: { embed: 'embed' }, writes: { embed: 'embed.tap' } });
  t.same(six.ends('depthformer').reads, { embed: 'embed.tap' });
  const embed = six.rings.filter((r) => r.carries === 'embed').map((r) => [r.name, r.producer, r.consumer]);
  t.same(embed, [
    ['embed', 3, 4],
    ['embed.tap', 4, 5],
  ]);
  t.equal(six.bell('playback'), 6);
  t.same(six.layout, { attention: 8, stop: 16, idle: 17, words: 24 });
  const many = new Topology(
    Array.from({ length: 8 }, (_, i) => ({ ...tap, name: `tap${i}` }))
      .concat([{ ...tap, name: 'src', reads: [], writes: ['embed'], capacities: { embed: () => 64 } }])
      .reverse(),
  );
  t.ok(many.layout.idle + 9 < many.layout.words, 'nine stages: every bell has its idle word inside the block');
  t.ok(many.layout.attention >= 10 && many.layout.stop >= many.layout.attention + 10, 'and its attention word');
});

t.test('a spec list that cannot form a pipeline is refused, naming the reason', async (t) => {
  const [capture, frontend] = PIPELINE_STAGES as [StageSpec, StageSpec];
  t.throws(() => new Topology([]), /at least one stage/);
  t.throws(() => new Topology([capture, capture]), /stage 'capture' appears twice/);
  t.throws(() => new Topology([capture, { ...frontend, name: 'Front' }]), /lowercase/);
  t.throws(() => new Topology([capture, frontend, { ...frontend, name: 'second' }]), /ring 'pcm16' has two readers: stages frontend and second/);
  t.throws(() => new Topology([capture, { ...capture, name: 'again', reads: [] }]), /writes 'pcm16', which an earlier stage writes/);
  t.throws(() => new Topology([{ ...frontend, capacities: {} }]), /no stage gives the capacity of ring 'pcm16'/);
  t.throws(() => PIPELINE.bell('tap'), /no stage 'tap'/);
});

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const dir = join(scratchDir('voxslab-topology-'), 'tiny');
makeCheckpoint({ config: 'tiny', seed: 5, out: dir, dtype: 'f32' });

/** One turn of the fixture through a pipeline of `topology`: the reply's tokens and samples, and the stages' record counts. */
async function converse(topology: Topology): Promise<{ tokens: number[]; pcm: Buffer; records: Record<string, number> }> {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const p = await Pipeline.start(dir, domain, { topology, pin: 'none', replySeconds: 2 });
  try {
    const src = openFileSource(fixture);
    const reader = new WavReader(src, 4096);
    const conv = await p.open({ seed: 7, inputRate: reader.info.sampleRate });
    await p.ready();
    const tokens: number[] = [];
    const port = new ConversationPort(p, conv, { text: (token) => tokens.push(token) });
    const chunk = new Float32Array(conv.chunk);
    const out = new Float32Array(conv.output.maxPayload);
    const blocks: Buffer[] = [];
    let pending = reader.readMono(chunk, chunk.length);
    let ended = false;
    for (let done = false; !done; ) {
      if (p.failure !== null) throw p.failure;
      const seen = p.bells.read(BELL_MAIN);
      let progress = false;
      while (!ended && (pending > 0 ? port.writePcm(chunk, 0, pending) : port.endSegment())) {
        progress = true;
        if (pending === 0) ended = true;
        else pending = reader.readMono(chunk, chunk.length);
      }
      if (port.events()) progress = true;
      for (let n = port.readOutput(out); n !== OUT_NONE; n = port.readOutput(out)) {
        progress = true;
        if (n === OUT_REPLY_END) done = true;
        if (n > 0) blocks.push(Buffer.from(out.slice(0, n).buffer));
      }
      if (!progress) await p.wait(seen, 100);
    }
    src.close();
    const stats = await p.stats();
    return { tokens, pcm: Buffer.concat(blocks), records: Object.fromEntries(stats.map((s) => [s.stage, s.records])) };
  } finally {
    await p.close();
    t.equal(domain.snapshot().held.total, 0, 'every byte back');
  }
}

t.test('a sixth stage added by its spec and file alone: a conversation through it is the same bytes', async (t) => {
  const five = await converse(PIPELINE);
  const six = await converse(new Topology([...PIPELINE_STAGES.slice(0, 3), tap, ...PIPELINE_STAGES.slice(3)]));
  t.ok(five.pcm.length > 0 && five.tokens.length > 0, `the reply has ${five.tokens.length} tokens and ${five.pcm.length / 4} samples`);
  t.ok((six.records.tap ?? 0) >= 2, `the tap copied ${six.records.tap} records (embedding rows and the segment's end)`);
  t.equal(six.records.depthformer, five.records.depthformer, 'the Depthformer stage saw as many records');
  t.same(six.tokens, five.tokens, 'same text');
  t.ok(six.pcm.equals(five.pcm), 'same reply bytes');
});
