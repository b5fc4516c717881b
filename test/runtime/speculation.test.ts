// Speculation: at a pause the Conformer stage encodes the turn so far ahead and the Depthformer
// stage stages it and generates its reply ahead; the endpoint keeps it, speech that goes on
// rolls it back. Either way the conversation is byte for byte the one without speculation.
import t from 'tap';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { readWavSamples, scratchDir } from '../helpers.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { apmAvailable } from '../../src/dsp/aec.js';

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const model = join(scratchDir('voxslab-speculate-'), 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const speech = readWavSamples(fixture);
const rate = speech.rate;
const silence = (s: number): Float32Array => new Float32Array(Math.round(s * rate));

interface Heard {
  pcm: Buffer;
  userFrames: number[];
  turns: number;
  speculations: number;
  kept: number;
  /** The Depthformer stage's: turns staged and replies generated ahead, and those kept. */
  ahead: number;
  aheadKept: number;
  allocations: number;
  back: boolean;
}

/** The question (its own pause is longer than 300 ms and shorter than 600), then silence. */
async function converse(o: { speculateMs: number; silenceMs: number }): Promise<Heard> {
  const engine = await loadWithHooks(model, { replySeconds: 2, capacity: 1, ...o }, { trapAllocations: true });
  try {
    const base = engine.snapshot().held.total;
    const conv = await engine.open({ inputRate: rate, seed: 7, vad: true });
    const parts: Buffer[] = [];
    const userFrames: number[] = [];
    conv.on('audio', (e) => parts.push(Buffer.from(e.pcm.buffer, e.pcm.byteOffset, e.pcm.byteLength)));
    conv.on('turn_end', (e) => userFrames.push(e.userFrames));
    for (const part of [silence(1), speech.samples, silence(1.5)]) conv.write(part);
    let turns = 0;
    conv.on('speech_end', (e) => (turns += e.reason === 'vad' ? 1 : 0));
    await conv.nextTurn();
    // A split question has a second turn to wait for.
    if (o.silenceMs < 600) await conv.nextTurn();
    const stats = await engine.pipeline.stats();
    const conformer = stats.find((s) => s.stage === 'conformer')!;
    const depthformer = stats.find((s) => s.stage === 'depthformer')!;
    await conv.close();
    return {
      pcm: Buffer.concat(parts),
      userFrames,
      turns,
      speculations: conformer.speculations,
      kept: conformer.speculationsKept,
      ahead: depthformer.speculations,
      aheadKept: depthformer.speculationsKept,
      allocations: stats.reduce((n, s) => n + s.allocationsAfterReady, 0),
      back: engine.snapshot().held.total === base,
    };
  } finally {
    await engine.close();
  }
}

t.test(
  'speculation on equals off, byte for byte: a pause that resumes drops the turn encoded ahead, the end keeps it',
  { skip: apmAvailable() ? false : 'no WebRTC audio processing' },
  async (t) => {
    const off = await converse({ speculateMs: 0, silenceMs: 600 });
    t.equal(off.speculations + off.ahead, 0, 'off: nothing encoded or generated ahead');
    t.ok(off.pcm.length > 0, `off: a reply of ${off.pcm.length} bytes`);
    const on = await converse({ speculateMs: 200, silenceMs: 600 });
    t.ok(on.speculations >= 2, `on: ${on.speculations} turns encoded ahead (the question's own pause's was dropped)`);
    t.equal(on.kept, 1, 'the one at the end of the speech was kept');
    t.equal(on.ahead, on.speculations, `the Depthformer stage staged each and generated its reply ahead (${on.ahead})`);
    t.equal(on.aheadKept, 1, 'and kept the last: the reply that was played had been generated ahead, then rolled back the other');
    t.same(on.userFrames, off.userFrames, `the same turn (${off.userFrames.join(', ')} encoder frames)`);
    t.ok(on.pcm.equals(off.pcm), 'the same reply, byte for byte');
    t.equal(on.allocations, 0, 'nothing constructed in any stage after readiness');
    t.ok(on.back && off.back, 'every byte back at close');
    // The control: had the turn ended at the pause (what keeping that provisional turn would give), it would differ.
    const split = await converse({ speculateMs: 0, silenceMs: 300 });
    t.ok(split.userFrames.length >= 2 && !split.pcm.equals(off.pcm), `ending at the pause gives other turns (${split.userFrames.join(', ')}) and other bytes`);
  },
);
