// Barge-in inside the five-stage pipeline (VAD conversations), on the built artifact: real
// stage workers, real rings, the WebRTC VAD in the frontend stage.
import t from 'tap';
import { setTimeout as delay } from 'node:timers/promises';
import { speechScene } from '../helpers.js';
import type { Conversation, TurnSummary } from '../../src/index.js';
import { loadWithHooks } from '../../src/api/engine.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { EchoPath } from '../../src/dsp/echo.js';

const { model, speech, rate, silence, interrupt } = speechScene('voxslab-barge-api-');
const bytes = (x: Float32Array | Int16Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
const OPTIONS = { replySeconds: 8, lookaheadMs: 400, memoryLimit: '1GiB' };
const skip = apmAvailable() ? false : 'no WebRTC audio processing';

/** Reply audio of each turn, and each turn's summary as it ends. */
function record(conv: Conversation): { audio: Buffer[][]; turns: TurnSummary[] } {
  const audio: Buffer[][] = [];
  const turns: TurnSummary[] = [];
  conv.on('audio', (e) => {
    audio[e.turn] ??= [];
    audio[e.turn]!.push(Buffer.from(bytes(e.pcm)));
  });
  conv.on('turn_end', (s) => turns.push(s));
  return { audio, turns };
}

/** The second turn of a conversation whose first reply had at most `frames` audio frames, spoken after that reply. */
async function reference(frames: number): Promise<{ audio: Buffer; turns: TurnSummary[] }> {
  const engine = await loadWithHooks(model, OPTIONS, { replyFrameLimits: [frames] });
  try {
    const conv = await engine.open({ inputRate: rate, seed: 5, vad: true });
    const r = record(conv);
    for (const part of [silence(0.6), speech.samples, silence(1.2)]) conv.write(part);
    await conv.nextTurn();
    for (const part of [speech.samples, silence(1.5)]) conv.write(part);
    await conv.nextTurn();
    await conv.close();
    return { audio: Buffer.concat(r.audio[1] ?? []), turns: r.turns };
  } finally {
    await engine.close();
  }
}

t.test('speech over a reply cuts it to what was delivered; the next reply equals a conversation that only generated that part', { skip }, async (t) => {
  const engine = await loadWithHooks(model, OPTIONS, { trapAllocations: true });
  t.teardown(() => engine.close());
  const base = engine.snapshot().held.total;
  const conv = await engine.open({ inputRate: rate, seed: 5, vad: true });
  const r = record(conv);
  const barges: { turn: number; heardFrames: number | null; generatedFrames: number }[] = [];
  conv.on('barge_in', (e) => barges.push(e));
  // Both turns, however they interleave with the barge-in (the first may end in the same pass).
  const twoTurns = new Promise<void>((resolve) => conv.on('turn_end', () => r.turns.length >= 2 && resolve()));
  await interrupt(conv);
  await twoTurns;
  const [first, second] = r.turns;
  t.equal(barges.length, 1, 'one barge-in');
  const heard = barges[0]!.heardFrames!;
  t.equal(barges[0]!.turn, 0, 'the first reply was interrupted');
  t.ok(heard >= 1, `it kept ${heard} heard frames`);
  t.equal(first!.stop, 'interrupted');
  t.equal(first!.frames, heard, 'its summary counts the kept frames');
  const delivered = Buffer.concat(r.audio[0] ?? []).length / 4;
  const d = engine.config.detokenizer;
  const frameSamples = (engine.outputRate * d.upsample * d.hop) / d.sampleRate;
  t.equal(heard, Math.max(1, Math.ceil(delivered / frameSamples)), `the frames delivered (${delivered} samples) are the frames kept`);
  // Generation waited at the look-ahead beyond what was delivered.
  const bound = Math.ceil((delivered + (OPTIONS.lookaheadMs * engine.outputRate) / 1000) / frameSamples);
  const generated = barges[0]!.generatedFrames;
  t.ok(generated > heard && generated <= bound, `${generated} frames generated: more than heard, at most the look-ahead's ${bound}`);
  t.ok(heard < 8 * 12.5, 'the reply was cut before its end');
  t.ok(second!.frames > 0, 'the second turn got its reply');
  for (const s of await engine.pipeline.stats()) t.equal(s.allocationsAfterReady, 0, `the ${s.stage} stage allocated nothing after readiness`);
  await conv.close();
  t.equal(engine.snapshot().held.total, base, 'every byte back');

  // The reference never generated more than the heard frames of its first reply.
  const ref = await reference(heard);
  const got = Buffer.concat(r.audio[1] ?? []);
  t.equal(ref.turns[0]!.frames, heard);
  t.ok(got.length > 0 && got.equals(ref.audio), `the second reply is byte for byte the reference's (${got.length} and ${ref.audio.length} bytes)`);
  t.equal(second!.text, ref.turns[1]!.text);
  t.equal(second!.positions, ref.turns[1]!.positions, 'the same context positions');
  // Negative control: one frame more in the first reply changes the second.
  const more = await reference(heard + 1);
  t.notOk(more.audio.equals(got), 'a first reply one frame longer gives other bytes');
});

/** 20 s of the assistant's voice (real speech, with pauses) as played, and its echo as the microphone hears it. */
function echoScene(): { far: Float32Array; mic: Float32Array } {
  const gap = silence(0.4);
  const far = new Float32Array(7 * (speech.samples.length + gap.length));
  for (let k = 0; k < 7; k++) far.set(speech.samples, k * (speech.samples.length + gap.length));
  const mic = new Float32Array(far.length);
  new EchoPath({ rate, delayMs: 60, gain: 1, seed: 4 }).push(far, mic, 0, far.length);
  return { far, mic };
}

t.test('echo cancellation in the capture stage: the assistant’s echo at full level is not taken for the user; the user still is', { skip }, async (t) => {
  const engine = await loadWithHooks(model, OPTIONS, { trapAllocations: true });
  t.teardown(() => engine.close());
  const { far, mic } = echoScene();
  const base = engine.snapshot().held;
  const planned = (await engine.admission(rate, true, 60)).planned;
  t.ok(planned > (await engine.admission(rate, true)).planned, 'admission counts the echo canceller');
  const conv = await engine.open({ inputRate: rate, seed: 5, vad: true, echoDelayMs: 60 });
  t.equal(engine.snapshot().held.total - base.total, planned, 'planned bytes = charged bytes, echo canceller included');
  t.ok(engine.snapshot().held.native - base.native >= 1 << 20, 'the capture stage holds the echo canceller under the cap');
  const starts: number[] = [];
  let fed = 0;
  conv.on('speech_start', () => starts.push(fed));
  const block = 4000;
  for (let at = 0; at < far.length; at += block) {
    conv.writeDuplex(mic.subarray(at, at + block), far.subarray(at, at + block));
    fed = at + block;
  }
  // Then the user, with nothing playing: the one turn.
  const user = Float32Array.from(speech.samples, (x) => 0.5 * x);
  conv.writeDuplex(user, new Float32Array(user.length));
  conv.writeDuplex(silence(1.5), silence(1.5));
  const turn = await conv.nextTurn();
  t.equal(starts.length, 1, `one speech onset: the user’s (${starts.length} in all)`);
  t.ok(turn.userFrames > 0, `the user’s turn was heard and answered (${turn.userFrames} encoder frames)`);
  for (const s of await engine.pipeline.stats()) t.equal(s.allocationsAfterReady, 0, `the ${s.stage} stage allocated nothing after readiness`);
  await conv.close();
  t.same(engine.snapshot().held.total, base.total, 'every byte back, the echo canceller too');

  // Negative control: the same microphone without the far end, no cancellation.
  const plain = await engine.open({ inputRate: rate, seed: 5, vad: true });
  const onset = new Promise<void>((resolve) => plain.once('speech_start', () => resolve()));
  for (let at = 0; at < mic.length; at += block) plain.write(mic.subarray(at, at + block));
  const heard = await Promise.race([onset.then(() => true), delay(20_000, false, { ref: false })]);
  t.ok(heard, 'without cancellation the echo is taken for the user');
  await plain.close();
});
