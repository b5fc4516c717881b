// conversation.update(): a VAD conversation's turn-taking settings changed while it runs, through
// the stage workers' settings words (real workers, rings and the WebRTC VAD in the frontend).
import t from 'tap';
import { setTimeout as delay } from 'node:timers/promises';
import { speechScene } from '../helpers.js';
import { ArgumentError, ClosedError, type Conversation } from '../../src/index.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { apmAvailable, VoiceDetector } from '../../src/dsp/aec.js';

const { model, speech, rate, silence, interrupt } = speechScene('voxslab-update-');
const OPTIONS = { replySeconds: 2, lookaheadMs: 400, memoryLimit: '1GiB' };
const skip = apmAvailable() ? false : 'no WebRTC audio processing';

/** The speech_end events of `conv`, as they come. */
function ends(conv: Conversation): { samples: number; reason: string }[] {
  const seen: { samples: number; reason: string }[] = [];
  conv.on('speech_end', (e) => seen.push({ samples: e.samples, reason: e.reason }));
  return seen;
}

t.test('a longer silence set mid-conversation joins two utterances into one turn; the engine’s default splits them', { skip }, async (t) => {
  const engine = await loadWithHooks(model, OPTIONS, { trapAllocations: true });
  t.teardown(() => engine.close());
  const plain = await engine.open({ inputRate: rate, seed: 5, vad: true });
  const longer = await engine.open({ inputRate: rate, seed: 5, vad: true });
  t.same(longer.settings, { silenceMs: 600, minSpeechMs: 200, vad: 'low', lookaheadMs: 400 }, 'the engine’s settings to start with');
  longer.update({ silenceMs: 1500 });
  t.equal(longer.settings.silenceMs, 1500);
  const a = ends(plain);
  const b = ends(longer);
  // Two utterances 0.9 s apart: a turn's end under 600 ms of silence, not under 1500.
  const scene = [silence(0.8), speech.samples, silence(0.9), speech.samples, silence(2.2)];
  for (const conv of [plain, longer]) for (const part of scene) conv.write(part);
  const [p1, p2, l1] = await Promise.all([plain.nextTurn(), plain.nextTurn(), longer.nextTurn()]);
  await delay(300);
  t.same(
    a.map((e) => e.reason),
    ['vad', 'vad'],
    'the default silence: two turns',
  );
  t.same(
    b.map((e) => e.reason),
    ['vad'],
    'the longer silence: one turn',
  );
  // The encoder's frames, not the event's `samples`: those count what the main thread fed between
  // the two events, and it feeds ahead of the stages by as much as the ring takes.
  t.ok(
    l1!.userFrames >= p1!.userFrames + p2!.userFrames,
    `the one turn holds both utterances and the pause (${l1!.userFrames} encoder frames; split, ${p1!.userFrames} + ${p2!.userFrames})`,
  );
  // Back to the engine's value: the next pair of utterances is split again.
  longer.update({ silenceMs: 600 });
  for (const part of scene.slice(1)) longer.write(part);
  await longer.nextTurn();
  await longer.nextTurn();
  t.same(
    b.map((e) => e.reason),
    ['vad', 'vad', 'vad'],
    'after setting 600 ms again: two more turns',
  );
  for (const s of await engine.pipeline.stats()) t.equal(s.allocationsAfterReady, 0, `the ${s.stage} stage allocated nothing after readiness`);
});

t.test('a shorter look-ahead holds generation closer to delivery', { skip }, async (t) => {
  const engine = await loadWithHooks(model, { ...OPTIONS, replySeconds: 8 }, {});
  t.teardown(() => engine.close());
  const conv = await engine.open({ inputRate: rate, seed: 5, vad: true });
  conv.update({ lookaheadMs: 80 });
  const barges: { heardFrames: number | null; generatedFrames: number }[] = [];
  conv.on('barge_in', (e) => barges.push(e));
  let delivered = 0;
  conv.on('audio', (e) => {
    if (e.turn === 0) delivered += e.pcm.length;
  });
  await interrupt(conv);
  t.equal(barges.length, 1, 'the user spoke over the reply');
  const d = engine.config.detokenizer;
  const frameSamples = (engine.outputRate * d.upsample * d.hop) / d.sampleRate;
  const bound = Math.ceil((delivered + (80 * engine.outputRate) / 1000) / frameSamples);
  t.ok(barges[0]!.generatedFrames <= bound, `${barges[0]!.generatedFrames} frames generated: at most the 80 ms look-ahead's ${bound}`);
  t.ok(bound < Math.ceil((delivered + (400 * engine.outputRate) / 1000) / frameSamples), 'a bound the engine’s 400 ms would not meet');
});

t.test('update checks every value before any applies, and refuses what a conversation cannot change', { skip }, async (t) => {
  const engine = await loadWithHooks(model, OPTIONS, {});
  t.teardown(() => engine.close());
  const vad = await engine.open({ inputRate: rate, vad: true });
  const before = vad.settings;
  t.throws(() => vad.update({ silenceMs: 900, minSpeechMs: 5 }), ArgumentError, 'minSpeechMs below its range');
  t.same(vad.settings, before, 'nothing applied');
  t.throws(() => vad.update({ silenceMs: 50 }), /silenceMs must be an integer from 100 to 10000/);
  t.throws(() => vad.update({ lookaheadMs: 500 }), /at most the engine's 400/);
  t.throws(() => vad.update({ vad: 'loud' as 'low' }), /vad must be very-low, low, moderate or high/);
  t.throws(() => vad.update({ silence: 900 } as never), /unknown setting 'silence'/);
  t.throws(() => vad.update(null as never), ArgumentError);
  vad.update({ minSpeechMs: 300, vad: 'high', lookaheadMs: 200 });
  t.same(vad.settings, { silenceMs: 600, minSpeechMs: 300, vad: 'high', lookaheadMs: 200 }, 'the rest keep their values');
  const plain = await engine.open({ inputRate: rate });
  t.throws(() => plain.update({ silenceMs: 900 }), /opened without vad: true/);
  await vad.close();
  t.throws(() => vad.update({ silenceMs: 900 }), ClosedError);
});

t.test('an engine with Silero has no likelihood to change', async (t) => {
  const engine = await loadWithHooks(model, { ...OPTIONS, vad: 'silero' }, {});
  t.teardown(() => engine.close());
  const conv = await engine.open({ inputRate: rate, vad: true });
  t.throws(() => conv.update({ vad: 'high' }), /loaded with vad: 'silero'/);
  conv.update({ silenceMs: 800 });
  t.equal(conv.settings.silenceMs, 800, 'its silence still changes');
});

t.test('the WebRTC VAD takes a new likelihood between frames, its state carried over', { skip }, (t) => {
  // Speech under noise: the lowest likelihood calls none of it voice, the highest some.
  let seed = 1;
  const noise = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed / 2 ** 32 - 0.5) * 0.05;
  };
  const x = Float32Array.from({ length: 2 * speech.samples.length }, (_, i) => 0.05 * speech.samples[i % speech.samples.length]! + noise());
  const half = x.length / 2;
  const voiced = (d: Uint8Array, from: number, to: number): number => d.subarray(from, to).reduce((a, v) => a + v, 0);
  const run = (switchTo: 'high' | null): number => {
    const det = new VoiceDetector('very-low');
    const dec = new Uint8Array(x.length / 160 + 2);
    const n = det.push(x, 0, half, dec, 0);
    if (switchTo !== null) det.setLikelihood(switchTo);
    const m = det.push(x, half, half, dec, n);
    det.close();
    return voiced(dec, n, n + m);
  };
  const kept = run(null);
  const switched = run('high');
  t.ok(switched > kept, `the second half: ${switched} voiced frames at the high likelihood, ${kept} at very-low`);
  t.end();
});
