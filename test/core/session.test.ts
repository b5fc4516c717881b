import t from 'tap';
import { MemoryDomain } from '../../src/memory/index.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { SpeechModel, type Conversation } from '../../src/core/conversation.js';
import { DuplexSession } from '../../src/core/session.js';
import { FADE_MS } from '../../src/duplex/fader.js';
import { LoopbackDevice } from '../../src/io/loopback.js';
import { resampleSignal } from '../../src/dsp/resample.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { assistantVoice, corpusTools, labelFrames, utterance } from '../../bench/corpus.js';
import { allocationProbe, scratchDir } from '../helpers.js';
import { APM_HEAP_BOUND } from '../../src/dsp/aec.js';

const skip = apmAvailable() && corpusTools() ? false : 'needs WebRTC audio processing, espeak-ng and sox';
const RATE = 48000;

const up = (x: Float32Array): Float32Array => resampleSignal(x, 16000, RATE);

/** Where speech starts in `x` (16 kHz), by its labels. */
function onsetOf(x: Float32Array): number {
  const l = labelFrames(x);
  let f = 0;
  while (l[f] !== 1) f++;
  return f * 160;
}

const dir = skip === false ? scratchDir('voxslab-session-') : '';
if (skip === false) makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });

/** A ready duplex conversation of the tiny model speaking at `rate`, in a domain of its own. */
function ready(rate: number): { domain: MemoryDomain; conv: Conversation } {
  const domain = MemoryDomain.create({ limit: '2GiB' });
  const model = SpeechModel.load(dir, domain, { outputRate: rate });
  const conv = model.conversation({ seed: 7, inputRate: 16000, checkpoints: DuplexSession.checkpointsFor(model) });
  model.ready();
  conv.ready();
  return { domain, conv };
}

interface Run {
  log: string[];
  played: Buffer;
  silentFrom: number[];
  session: DuplexSession;
}

/** The user asks, the assistant answers, the user interrupts it 4 s into the answer. */
function scenario(): Run {
  const { conv } = ready(RATE);
  const first = utterance('What is the weather going to be like in Paris tomorrow morning?', 'en-us', 165);
  const second = utterance('Stop, that is not what I asked for at all.', 'en-gb', 165);
  const at1 = 16000;
  // Speech end, the 600 ms silence, then 4 s into the reply (barge-in waits for the echo
  // canceller's first 3 s of far end).
  const at2 = at1 + first.length + 9600 + 64000;
  const user16 = new Float32Array(at2 + second.length + 32000);
  user16.set(first, at1);
  user16.set(second, at2);
  const user = up(user16);
  const device = new LoopbackDevice({ rate: RATE, echo: { delayMs: 40, gain: 0.5, seed: 2 }, user });
  const log: string[] = [];
  const session = new DuplexSession(
    conv,
    device,
    {},
    {
      speechStart: (c) => log.push(`speech ${c}`),
      speechEnd: (c) => log.push(`end ${c}`),
      bargeIn: (c, heard) => log.push(`barge-in ${c} heard ${heard} kept ${conv.dialogue.frames} ${conv.dialogue.stop}`),
      replyStart: (c) => log.push(`reply ${c}`),
      replyEnd: (c) => log.push(`reply-end ${c}`),
      text: (tk) => log.push(`text ${tk}`),
      endpoint: (c, e) => log.push(`vad ${e} ${c}`),
    },
  );
  const played: Buffer[] = [];
  const silentFrom: number[] = [];
  let wasSilent = true;
  const onset2 = ((at2 + onsetOf(second)) * RATE) / 16000;
  while (device.clock + device.period <= user.length) {
    session.tick();
    played.push(Buffer.from(device.lastPlayed));
    const silent = device.lastPlayed.every((v) => v === 0);
    if (silent && !wasSilent) silentFrom.push(device.clock);
    wasSilent = silent;
  }
  log.push(`onset2 ${onset2}`);
  return { log, played: Buffer.concat(played), silentFrom, session };
}

t.test('duplex session on the loopback device: a turn, a reply, a barge-in cut to what was heard', { skip }, async (t) => {
  const a = scenario();
  const s = a.session;
  const events = a.log.filter((l) => !l.startsWith('text'));
  t.comment(events.join(' | '));
  t.equal(s.turns >= 1, true, `the user's question ended a turn (${s.turns})`);
  t.equal(
    events.some((e) => e.startsWith('reply ')),
    true,
    'the reply reached the device',
  );
  const barge = events.find((e) => e.startsWith('barge-in'));
  t.ok(barge !== undefined, 'the interruption was a barge-in');
  const heard = Number(barge?.split(' ')[3]);
  t.match(barge, new RegExp(`kept ${heard} interrupted$`), 'the conversation keeps exactly the frames heard, its reply interrupted');
  t.ok(heard >= 1, `the reply was cut to the ${heard} frames heard`);
  t.equal(s.conversation.dialogue.stop === 'interrupted' || s.turns >= 2, true, 'the reply ended as interrupted');
  const onset2 = Number(events.find((e) => e.startsWith('onset2'))!.split(' ')[1]);
  // The first sign of speech pauses playback: silent within the next period, the fade and the
  // period that shows it.
  const maybe = Number(events.find((e) => e.startsWith('vad 4') && Number(e.split(' ')[2]) >= onset2 - 0.1 * RATE)?.split(' ')[2]);
  const stop = a.silentFrom.find((c) => c >= maybe);
  const period = 480;
  t.ok(
    stop !== undefined && stop - maybe <= 2 * period + (FADE_MS / 1000) * RATE + period,
    `playback silent ${stop === undefined ? 'never' : `${Math.round(((stop - maybe) * 1000) / RATE)} ms`} after the first sign of speech`,
  );
  t.comment(
    `from the labelled onset of the interruption to silence: ${stop === undefined ? '-' : Math.round(((stop - onset2) * 1000) / RATE)} ms (the p95 ` +
      `over many is bench duplex's)`,
  );
  // Deterministic: the same bytes played and the same events, run again.
  const b = scenario();
  t.equal(b.played.equals(a.played), true, `the same ${a.played.length} bytes played`);
  t.same(b.log, a.log, 'the same events and text');
  a.session.close();
  b.session.close();
});

t.test('duplex session: listening allocates nothing', { skip }, async (t) => {
  const { conv } = ready(RATE);
  const noise = new Float32Array(RATE * 600);
  for (let i = 0; i < noise.length; i++) noise[i] = 0.001 * Math.sin(i * 0.37);
  const device = new LoopbackDevice({ rate: RATE, echo: { delayMs: 40, gain: 0.5 }, user: noise });
  const session = new DuplexSession(conv, device);
  const probe = allocationProbe(200, () => session.tick());
  t.equal(probe.arrayBuffers, 0, 'no ArrayBuffer');
  t.ok(probe.heap < 1024, `JS heap growth ${probe.heap} bytes over 200 periods`);
  session.close();
});

t.test('duplex session with Silero VAD: the user is heard, their words are the turn, and listening allocates nothing', { skip }, async (t) => {
  const { conv } = ready(RATE);
  const ask = utterance('What is the weather like tomorrow?', 'en-us', 165);
  const user16 = new Float32Array(16000 * 5);
  user16.set(ask, 16000);
  const device = new LoopbackDevice({ rate: RATE, echo: null, user: up(user16) });
  const heard: number[] = [];
  const session = new DuplexSession(conv, device, { vad: 'silero' }, { speechStart: (c) => heard.push(c), speechEnd: (c) => heard.push(c) });
  t.equal(session.vad.constructor.name, 'SileroVad');
  // The turn the conversation gets holds the words: its segment starts within the pre-roll of the speech.
  let listened = 0;
  const listenRows = conv.listenRows.bind(conv);
  conv.listenRows = (rows: Float32Array, at: number, n: number) => {
    listened += n * 160;
    return listenRows(rows, at, n);
  };
  while (device.clock + device.period <= 4.5 * RATE) session.tick();
  t.equal(heard.length, 2, `speech began and ended (${heard.map((c) => (c / RATE).toFixed(2)).join(', ')} s)`);
  t.ok(heard[0]! > 1 * RATE && heard[0]! < 1.4 * RATE, 'the start heard near the first word');
  t.equal(session.turns, 1, 'one turn');
  t.ok(listened >= ask.length * 0.9, `the turn holds the utterance (rows of ${listened} of ${ask.length} samples)`);
  session.close();
  const quiet = new Float32Array(RATE * 600);
  for (let i = 0; i < quiet.length; i++) quiet[i] = 0.001 * Math.sin(i * 0.37);
  const { conv: c2 } = ready(RATE);
  const idle = new DuplexSession(c2, new LoopbackDevice({ rate: RATE, echo: { delayMs: 40, gain: 0.5 }, user: quiet }), { vad: 'silero' });
  const probe = allocationProbe(200, () => idle.tick());
  t.equal(probe.arrayBuffers, 0, 'no ArrayBuffer');
  t.ok(probe.heap < 1024, `JS heap growth ${probe.heap} bytes over 200 periods`);
  idle.close();
});

/** The assistant's speech at the device rate. */
const assistantSpeech = (seconds: number, rate = RATE): Float32Array => {
  const x = assistantVoice(seconds);
  return rate === 16000 ? x : up(x).subarray(0, seconds * rate);
};

t.test('duplex session: the user interrupts a prompt played with say()', { skip }, async (t) => {
  const { conv } = ready(RATE);
  const prompt = assistantSpeech(12);
  const stop = utterance('Stop, that is not what I asked for at all.', 'en-gb', 165);
  const user16 = new Float32Array(16000 * 14);
  user16.set(stop, 16000 * 8);
  const device = new LoopbackDevice({ rate: RATE, echo: { delayMs: 60, gain: 0.3, seed: 4 }, user: up(user16) });
  const log: string[] = [];
  const session = new DuplexSession(conv, device, {}, { bargeIn: (c, heard) => log.push(`barge-in ${c} ${heard}`) });
  session.say(prompt);
  t.throws(() => session.say(prompt), /the assistant is speaking/, 'one voice at a time');
  // The first seconds converge the canceller (barge-in waits for it); the user speaks at 8 s.
  while (device.clock + device.period <= 13 * RATE) session.tick();
  t.equal(log.length, 1, `one barge-in: ${log.join(', ')}`);
  const at = Number(log[0]?.split(' ')[1]);
  t.ok(at > 8 * RATE && at < 8.6 * RATE, `when the user spoke (${(at / RATE).toFixed(2)} s)`);
  t.equal(Number(log[0]?.split(' ')[2]), 0, 'nothing of the conversation was cut (the prompt was not the model)');
  t.equal(session.turns, 1, "the user's words became a turn");
  session.close();
});

t.test('duplex session: every byte is held under the cap by session/N, and given back at close', { skip }, async (t) => {
  const { domain, conv } = ready(RATE);
  const before = domain.snapshot();
  const session = new DuplexSession(conv, new LoopbackDevice({ rate: RATE, echo: null }));
  const during = domain.snapshot();
  const owner = during.owners.find((o) => o.name === 'session/0');
  t.ok(owner !== undefined, 'the session has its owner');
  const cat = (name: string): number => owner?.categories[name]?.footprint ?? 0;
  t.equal(cat('native.audio'), APM_HEAP_BOUND.echo + APM_HEAP_BOUND.voice, 'the engines are held at their bound');
  t.ok(cat('capture') > 0 && cat('playback.payload') > 0, `capture ${cat('capture')} and playback ${cat('playback.payload')} bytes carved`);
  t.equal(during.held.native, APM_HEAP_BOUND.echo + APM_HEAP_BOUND.voice, 'native bytes in the process total');
  t.equal(during.held.total - before.held.total, owner?.held, 'the process total grew by what the session holds, once');
  t.equal(owner?.sealed, true, 'sealed: ready');
  session.close();
  const after = domain.snapshot();
  t.equal(after.held.total, before.held.total, 'every byte given back at close');
  t.equal(after.held.native, 0, 'the engines too');
  // A second session of the same conversation may be set up again.
  new DuplexSession(conv, new LoopbackDevice({ rate: RATE, echo: null })).close();
  const tight = MemoryDomain.create({ limit: '2GiB' });
  const m2 = SpeechModel.load(dir, tight, { outputRate: RATE });
  const c2 = m2.conversation({ seed: 7, inputRate: 16000 });
  m2.ready();
  c2.ready();
  tight.limit.setLimit(tight.snapshot().held.total + 256 * 1024);
  t.throws(
    () => new DuplexSession(c2, new LoopbackDevice({ rate: RATE, echo: null })),
    { code: 'ERR_VOXSLAB_MEMORY_LIMIT' },
    'a session that does not fit under the cap is refused',
  );
  t.equal(tight.snapshot().held.native, 0, 'and holds nothing');
});
