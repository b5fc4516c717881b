// The library API on the built artifact: real stage workers, real rings, real files.
import t from 'tap';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { readWavSamples, scratchDir } from '../helpers.js';
import { runCommand } from '../../src/cli/run.js';
import { AbortedError, CapacityError, ClosedError, load, MemoryLimitError, type ConversationEvent, type Engine } from '../../src/index.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { SpeechModel } from '../../src/core/conversation.js';

const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));
const work = scratchDir('voxslab-api-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const quiet = (): void => undefined;
const REPLY = 2;

const readWav = readWavSamples;

const speech = readWav(fixture);
const bytes = (x: Float32Array | Int16Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

/** The single-thread engine's reply to the fixture with `seed` (the reference). */
async function reference(seed: number): Promise<Buffer> {
  const out = join(work, `ref-${seed}.wav`);
  await runCommand({ model, inputs: [fixture], outputs: [out], seed: String(seed), reply: String(REPLY), engine: 'single' }, quiet);
  return bytes(readWav(out).samples);
}

/** One turn through the push API: the reply's samples, concatenated. */
async function talk(engine: Engine, seed: number, input = speech.samples): Promise<{ pcm: Buffer; text: string }> {
  const conv = await engine.open({ inputRate: speech.rate, seed });
  const parts: Float32Array[] = [];
  conv.on('audio', (e) => parts.push(e.pcm as Float32Array));
  for (let at = 0; at < input.length; at += 3000) conv.write(input.subarray(at, at + 3000));
  conv.endTurn();
  const turn = await conv.nextTurn();
  await conv.close();
  return { pcm: Buffer.concat(parts.map(bytes)), text: turn.text };
}

t.test('a conversation through the library gives exactly the single-thread engine’s bytes', async (t) => {
  const ref = await reference(5);
  const engine = await load(model, { replySeconds: REPLY, memoryLimit: '1GiB' });
  t.teardown(() => engine.close());
  const base = engine.snapshot().held.total;
  const got = await talk(engine, 5);
  t.ok(got.pcm.length > 0, 'the reply has audio');
  t.ok(got.pcm.equals(ref), `same bytes (${got.pcm.length} and ${ref.length})`);
  t.equal(engine.snapshot().held.total, base, 'closing the conversation returns its bytes');
  // The index and owners are used again: the next conversation gives the same bytes.
  const again = await talk(engine, 5);
  t.ok(again.pcm.equals(ref), 'a conversation opened after a close gives the same bytes');
  await engine.close();
  t.equal(engine.snapshot().held.total, 0, 'closing the engine returns every byte');
});

t.test('two conversations opened at different times run at once and each equals its solo bytes', async (t) => {
  const [refA, refB] = [await reference(7), await reference(8)];
  const engine = await load(model, { replySeconds: REPLY });
  t.teardown(() => engine.close());
  const base = engine.snapshot().held.total;
  const a = talk(engine, 7);
  await new Promise((r) => setTimeout(r, 30));
  const b = talk(engine, 8, speech.samples);
  const [ga, gb] = await Promise.all([a, b]);
  t.ok(ga.pcm.equals(refA), 'conversation A: solo bytes');
  t.ok(gb.pcm.equals(refB), 'conversation B: solo bytes');
  t.equal(engine.snapshot().held.total, base);
});

t.test('admission: a conversation the cap cannot take is refused before anything is carved; after a close it fits', async (t) => {
  const probe = await load(model, { replySeconds: REPLY });
  const loaded = probe.snapshot().held.total;
  const { planned } = await probe.admission(speech.rate);
  await probe.close();
  // Room for one conversation and not two.
  const engine = await load(model, { replySeconds: REPLY, memoryLimit: loaded + planned + Math.floor(planned / 2) });
  t.teardown(() => engine.close());
  const c1 = await engine.open({ inputRate: speech.rate });
  const held = engine.snapshot().held.total;
  t.equal(held - loaded, planned, 'the planned bytes are exactly what the open charged');
  t.equal((await engine.admission(speech.rate)).admit, false, 'admission says no');
  const slabs = engine.snapshot().liveSlabs;
  await t.rejects(engine.open({ inputRate: speech.rate }), MemoryLimitError);
  t.equal(engine.snapshot().held.total, held, 'nothing was carved for the refused conversation');
  t.equal(engine.snapshot().liveSlabs, slabs);
  t.equal(engine.snapshot().reserved, 0);
  await c1.close();
  const c2 = await engine.open({ inputRate: speech.rate });
  t.equal(engine.snapshot().held.total, held, 'the next conversation fits once the first is closed');
  await c2.close();
});

t.test('compute admission: the capacity measured at load, or given, refuses a conversation beyond it before anything is carved', async (t) => {
  const measured = await load(model, { replySeconds: REPLY });
  const m = measured.capacity;
  t.equal(m.measured, true, 'measured when it loaded');
  t.same(m.rows, [1, 2, 4, 8, 16], 'a frame of 1 to 16 conversations at once was timed');
  t.ok(
    m.frameMs.every((ms) => ms > 0),
    `every frame took time: ${m.frameMs.map((ms) => ms.toFixed(2)).join(', ')} ms`,
  );
  t.ok(m.frameMs[4]! > m.frameMs[0]!, 'sixteen at once take longer than one');
  t.ok(m.conversations >= 1 && m.conversations <= 64, `capacity ${m.conversations}`);
  t.equal(m.periodMs, 80, 'a frame carries 80 ms');
  t.equal(measured.realTimeMargin, 1, 'nothing open: the whole period is left');
  const c0 = await measured.open({ inputRate: speech.rate });
  t.ok(measured.realTimeMargin! < 1, `one open: margin ${measured.realTimeMargin}`);
  await c0.close();
  await measured.close();

  for (const bad of [0, 1025, 1.5, -1]) await t.rejects(load(model, { capacity: bad }), /capacity must be/, `capacity ${bad} is refused`);
  // A model that is not a string is refused by name, before anything loads.
  await t.rejects(load({ model: 'tiny' } as unknown as string), {
    name: 'ArgumentError',
    message: /got an object \(options go second: load\(model, options\)\)/,
  });
  await t.rejects(load('' as string), { name: 'ArgumentError', message: /load: the model is a string, a built-in name \(tiny, small, lfm2-audio-1.5b\)/ });
  await t.rejects(load(7 as unknown as string), { name: 'ArgumentError', message: /got 7$/ });
  const engine = await load(model, { replySeconds: REPLY, capacity: 2 });
  t.teardown(() => engine.close());
  t.same(engine.capacity, { conversations: 2, measured: false, periodMs: 80, rows: [], frameMs: [] }, 'given: nothing measured');
  t.equal(engine.realTimeMargin, null);
  const [a, b] = await Promise.all([engine.open({ inputRate: speech.rate }), engine.open({ inputRate: speech.rate })]);
  const held = engine.snapshot().held.total;
  const adm = await engine.admission(speech.rate);
  t.match(adm, { bytes: true, compute: false, admit: false }, 'admission: bytes enough, compute not');
  const e = await engine.open({ inputRate: speech.rate }).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(e instanceof CapacityError, `refused with CapacityError: ${(e as Error).message}`);
  t.match((e as Error).message, /^2 conversations are open: the engine keeps 2 in real time \(the capacity option\)$/);
  t.equal(engine.snapshot().held.total, held, 'nothing was carved for it');
  await b.close();
  t.equal((await engine.admission(speech.rate)).admit, true, 'after a close it admits again');
  const c = await engine.open({ inputRate: speech.rate });
  await Promise.all([a.close(), c.close()]);
});

t.test('the Duplex stream: s16 bytes in, s16 bytes out; ending the input ends the reply', async (t) => {
  const ref = readWav(join(work, 'ref-5.wav')).samples;
  const engine = await load(model, { replySeconds: REPLY });
  t.teardown(() => engine.close());
  const conv = await engine.open({ inputRate: speech.rate, seed: 5, format: 's16' });
  const s = conv.stream();
  const chunks: Buffer[] = [];
  s.on('data', (b: Buffer) => chunks.push(b));
  const ended = new Promise((r) => s.once('end', r));
  const pcm = new Int16Array(speech.samples.length);
  // The fixture is 16-bit: its samples round-trip exactly.
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(speech.samples[i]! * 32768);
  const all = bytes(pcm);
  // Odd-sized writes: a sample may straddle two chunks.
  for (let at = 0; at < all.length; at += 1001) s.write(all.subarray(at, at + 1001));
  s.end();
  await ended;
  const got = Buffer.concat(chunks);
  const want = new Int16Array(ref.length);
  for (let i = 0; i < ref.length; i++) want[i] = Math.max(-32768, Math.min(32767, Math.round(ref[i]! * 32768)));
  t.ok(got.equals(bytes(want)), `the reply's s16 bytes (${got.length} bytes)`);
  await conv.close();
});

t.test('samples that are not finite are refused whole at every entry, and the conversation is not poisoned', async (t) => {
  const ref = await reference(5);
  const engine = await load(model, { replySeconds: REPLY, memoryLimit: '1GiB' });
  t.teardown(() => engine.close());
  const conv = await engine.open({ inputRate: speech.rate, seed: 5 });
  const parts: Float32Array[] = [];
  conv.on('audio', (e) => parts.push(e.pcm as Float32Array));
  // A second of speech with 100 NaN in it, then ±Infinity: each block refused, naming its first bad sample.
  const poisoned = speech.samples.slice(0, speech.rate);
  for (let i = 0; i < 100; i++) poisoned[500 + 37 * i] = Number.NaN;
  t.throws(() => conv.write(poisoned), { name: 'BadInputError', code: 'ERR_VOXSLAB_BAD_INPUT', field: 'samples', offset: 500 }, 'NaN');
  const inf = speech.samples.slice(0, 3000);
  inf[2999] = Number.NEGATIVE_INFINITY;
  t.throws(() => conv.write(inf), { name: 'BadInputError', offset: 2999, message: /sample 2999 of the block is -Infinity/ }, '-Infinity');
  const f32 = Buffer.alloc(8);
  f32.writeFloatLE(0.5, 0);
  f32.writeFloatLE(Number.POSITIVE_INFINITY, 4);
  t.throws(() => conv.writeBytes(f32), { name: 'BadInputError', offset: 1 }, 'Infinity as f32 bytes');
  // Nothing of those reached a stage: the turn after them is the clean run's, byte for byte.
  for (let at = 0; at < speech.samples.length; at += 3000) conv.write(speech.samples.subarray(at, at + 3000));
  conv.endTurn();
  await conv.nextTurn();
  const got = Buffer.concat(parts.map(bytes));
  t.ok(got.length > 0 && got.equals(ref), `the reply equals the clean conversation's (${got.length} bytes)`);
  // Negative control: the same NaN block let through as silence would change the reply.
  const silenced = poisoned.map((x) => (Number.isFinite(x) ? x : 0));
  const other = await talk(engine, 5, Float32Array.from([...silenced, ...speech.samples]));
  t.notOk(other.pcm.equals(ref), 'speech with those samples as silence gives another reply');
  // The stream's writable side fails with the same error.
  const streamed = await engine.open({ inputRate: speech.rate, seed: 5, format: 'f32' });
  const s = streamed.stream();
  const failed = new Promise<Error>((resolve) => s.once('error', resolve));
  s.write(f32);
  const e = await failed;
  t.match(e, { name: 'BadInputError', offset: 1 }, 'stream(): the write fails with the typed error');
  await streamed.close();
  await conv.close();
});

t.test('events: the async iterator yields a turn in order and ends at close', async (t) => {
  const engine = await load(model, { replySeconds: REPLY });
  t.teardown(() => engine.close());
  const conv = await engine.open({ inputRate: speech.rate, seed: 5 });
  const seen: ConversationEvent[] = [];
  const done = (async () => {
    for await (const e of conv.events()) {
      seen.push(e);
      if (e.type === 'turn_end') await conv.close();
    }
  })();
  conv.write(speech.samples);
  conv.endTurn();
  await done;
  const types = seen.map((e) => e.type);
  t.same(types.slice(0, 3), ['memory', 'speech_start', 'speech_end'], 'the manifest at open, then the turn');
  t.same(types.slice(-2), ['turn_end', 'memory'], 'the reply, then the manifest after it');
  t.ok(types.includes('audio'));
  t.ok(
    seen.every((e) => e.type === 'error' || e.turn === 0),
    'every event names turn 0',
  );
  const end = seen.at(-2) as Extract<ConversationEvent, { type: 'turn_end' }>;
  const texts = seen.filter((e): e is Extract<ConversationEvent, { type: 'text' }> => e.type === 'text');
  t.equal(texts.map((e) => e.delta).join(''), end.text, 'the text deltas add up to the turn’s text');
  t.equal(texts.length, end.tokens.length);
  t.rejects(conv.nextTurn(), ClosedError, 'a closed conversation refuses');
  t.throws(() => conv.write(speech.samples), ClosedError);
});

t.test('an AbortSignal ends a conversation mid-reply: the waiter rejects and every byte comes back', async (t) => {
  const engine = await load(model, { replySeconds: 10 });
  t.teardown(() => engine.close());
  const base = engine.snapshot().held.total;
  const ac = new AbortController();
  const conv = await engine.open({ inputRate: speech.rate, signal: ac.signal });
  conv.once('audio', () => ac.abort());
  const closed = new Promise<void>((r) => conv.once('close', () => r()));
  conv.write(speech.samples);
  conv.endTurn();
  await t.rejects(conv.nextTurn(), AbortedError);
  await closed;
  t.equal(engine.snapshot().held.total, base, 'the conversation’s bytes are back');
  // The stages dropped its pass: the next conversation runs to the end.
  const next = await talk(engine, 5);
  t.ok(next.pcm.length > 0);
});

t.test(
  'VAD mode (WebRTC VAD, the default): the pipeline finds the turns itself; a short burst is dropped; the bytes are held and given back',
  { skip: apmAvailable() ? false : 'no WebRTC audio processing' },
  async (t) => {
    const engine = await load(model, { replySeconds: REPLY });
    t.teardown(() => engine.close());
    const base = engine.snapshot().held.total;
    const plain = (await engine.admission(speech.rate)).planned;
    const planned = (await engine.admission(speech.rate, true)).planned;
    t.ok(planned > plain, `admission counts the VAD engine (${planned} against ${plain} bytes)`);
    const conv = await engine.open({ inputRate: speech.rate, seed: 5, vad: true });
    t.ok(engine.snapshot().held.native > 0, 'the frontend holds its VAD engine under the cap');
    t.equal(engine.snapshot().held.total - base, planned, 'planned bytes = charged bytes, VAD engine included');
    const seen: string[] = [];
    conv.on('speech_start', (e) => seen.push(`start ${e.turn}`));
    conv.on('speech_end', (e) => seen.push(`end ${e.turn} ${e.reason}`));
    conv.on('turn_end', (e) => seen.push(`reply ${e.turn}`));
    const rate = speech.rate;
    const silence = (s: number): Float32Array => new Float32Array(Math.round(s * rate));
    // A 100 ms click, silence, the question, silence: no endTurn() anywhere.
    const click = Float32Array.from({ length: Math.round(0.1 * rate) }, (_, i) => 0.4 * Math.sin((2 * Math.PI * 220 * i) / rate));
    for (const part of [silence(1), click, silence(1.2), speech.samples, silence(1.5)]) conv.write(part);
    const turn = await conv.nextTurn();
    t.same(
      seen.filter((s) => !s.startsWith('reply')),
      ['start 0', 'end 0 dropped', 'start 0', 'end 0 vad'],
      `the click was dropped, the question was a turn (${seen.join(', ')})`,
    );
    t.ok(turn.frames > 0, `the reply came (${turn.frames} frames)`);
    await conv.close();
    t.equal(engine.snapshot().held.total, base, 'every byte back, the VAD engine too');
    t.equal(engine.snapshot().held.native, 0);
  },
);

t.test(
  'VAD mode: a turn is its speech through its end and a fixed tail, whatever silence ended it',
  { skip: apmAvailable() ? false : 'no WebRTC audio processing' },
  async (t) => {
    const rate = speech.rate;
    const silence = (s: number): Float32Array => new Float32Array(Math.round(s * rate));
    // A voiced burst long enough to be speech (a shorter one, a click, does not move the speech's end).
    const burst = Float32Array.from({ length: Math.round(0.3 * rate) }, (_, i) => {
      let v = 0;
      for (let h = 1; h < 20; h++) v += Math.sin((2 * Math.PI * 140 * h * i) / rate) / h;
      return 0.2 * v;
    });
    const turn = async (silenceMs: number, after: Float32Array[]): Promise<{ pcm: Buffer; userFrames: number; turns: number }> => {
      const engine = await load(model, { replySeconds: REPLY, silenceMs, capacity: 1 });
      try {
        const conv = await engine.open({ inputRate: rate, seed: 5, vad: true });
        const parts: Float32Array[] = [];
        let turns = 0;
        conv.on('audio', (e) => parts.push(e.pcm as Float32Array));
        conv.on('speech_end', (e) => (turns += e.reason === 'vad' ? 1 : 0));
        for (const part of [silence(1), speech.samples, ...after]) conv.write(part);
        const summary = await conv.nextTurn();
        await conv.close();
        return { pcm: Buffer.concat(parts.map((p) => bytes(p))), userFrames: summary.userFrames, turns };
      } finally {
        await engine.close();
      }
    };
    const at600 = await turn(600, [silence(1.5)]);
    t.ok(at600.pcm.length > 0 && at600.turns === 1, `one turn, a reply of ${at600.pcm.length} bytes`);
    // The question's own pauses are shorter than 600 ms: longer silences end it at the same place.
    const at1200 = await turn(1200, [silence(2)]);
    t.equal(at1200.turns, 1);
    t.equal(at1200.userFrames, at600.userFrames, `the same encoder frames at silenceMs 600 and 1200 (${at600.userFrames})`);
    t.ok(at1200.pcm.equals(at600.pcm), 'the same reply, byte for byte');
    // The control: speech inside the silence moves the speech's end: the turn is longer.
    const more = await turn(600, [silence(0.25), burst, silence(1.5)]);
    t.equal(more.turns, 1, `still one turn (${more.turns})`);
    t.ok(more.userFrames > at600.userFrames, `a voiced burst 250 ms on is in the turn (${more.userFrames} encoder frames)`);
  },
);

t.test('VAD mode with Silero: a click is not speech, the question is a turn; its weights are held in the arena and given back', async (t) => {
  const engine = await load(model, { replySeconds: REPLY, vad: 'silero' });
  t.teardown(() => engine.close());
  const base = engine.snapshot().held.total;
  const plain = (await engine.admission(speech.rate)).planned;
  const planned = (await engine.admission(speech.rate, true)).planned;
  t.ok(planned - plain > 1_200_000, `admission counts the Silero weights (${planned} against ${plain} bytes)`);
  const conv = await engine.open({ inputRate: speech.rate, seed: 5, vad: true });
  const audio = engine.snapshot().owners.reduce((sum, o) => sum + (o.categories['native.audio']?.footprint ?? 0), 0);
  t.equal(audio, 0, 'no native audio engine');
  t.equal(engine.snapshot().held.total - base, planned, 'planned bytes = charged bytes');
  const seen: string[] = [];
  conv.on('speech_start', (e) => seen.push(`start ${e.turn}`));
  conv.on('speech_end', (e) => seen.push(`end ${e.turn} ${e.reason}`));
  const rate = speech.rate;
  const silence = (s: number): Float32Array => new Float32Array(Math.round(s * rate));
  const click = Float32Array.from({ length: Math.round(0.1 * rate) }, (_, i) => 0.4 * Math.sin((2 * Math.PI * 220 * i) / rate));
  for (const part of [silence(1), click, silence(1.2), speech.samples, silence(1.5)]) conv.write(part);
  const turn = await conv.nextTurn();
  t.same(seen, ['start 0', 'end 0 vad'], `one turn, the question (${seen.join(', ')})`);
  t.ok(turn.frames > 0, `the reply came (${turn.frames} frames)`);
  await conv.close();
  t.equal(engine.snapshot().held.total, base, 'every byte back');
});

t.test('the Depthformer stage runs a new conversation’s system prompt before its first turn', async (t) => {
  const ref = SpeechModel.load(model, MemoryDomain.create(), {});
  const chunks = Math.ceil(ref.prompts.system.length / ref.options.prefillChunk);
  const engine = await load(model, {});
  try {
    const conv = await engine.open({ inputRate: speech.rate, seed: 1 });
    const prefill = async (): Promise<{ ms: number; count: number } | undefined> =>
      (await engine.pipeline.stats()).find((s) => s.stage === 'depthformer')!.clocks[conv.index]?.prefill;
    // No audio is written: only the system prompt can have been prefilled.
    for (let i = 0; i < 500 && (await prefill())?.count !== chunks; i++) await new Promise((r) => setTimeout(r, 10));
    const p = await prefill();
    t.equal(p?.count, chunks, `${ref.prompts.system.length} system prompt positions prefilled in ${chunks} chunk(s) before any input`);
    await conv.close();
  } finally {
    await engine.close();
  }
});
