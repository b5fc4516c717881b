// One duplex policy: the one-thread session and the five-stage pipeline, fed the same audio on
// the same device, find the same turn, give the encoder the same rows, and play the same reply,
// byte for byte. (A headset: nothing played reaches the microphone, so where each happens to
// start playing cannot change what the other hears.)
import t from 'tap';
import { MemoryDomain } from '../../src/memory/index.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { SpeechModel } from '../../src/core/conversation.js';
import { DuplexSession, type DuplexDevice } from '../../src/core/session.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { load } from '../../src/api/engine.js';
import { corpusTools, utterance } from '../../bench/corpus.js';
import { scratchDir } from '../helpers.js';

const skip = apmAvailable() && corpusTools() ? false : 'needs WebRTC audio processing, espeak-ng and sox';
const RATE = 16000;

/** A headset at 16 kHz: the user's voice in the microphone, no far-end reference; it keeps what it played. */
class Headset implements DuplexDevice {
  readonly rate = RATE;
  readonly period = 160;
  readonly latencyMs = 0;
  clock = 0;
  readonly played: number[] = [];
  readonly #user: Float32Array;
  constructor(user: Float32Array) {
    this.#user = user;
  }
  tick(played: Float32Array, mic: Float32Array, far: Float32Array): void {
    for (let i = 0; i < this.period; i++) {
      mic[i] = this.#user[this.clock + i] ?? 0;
      far[i] = 0;
      this.played.push(played[i]!);
    }
    this.clock += this.period;
  }
  /** What was played, from its first sound to its last. */
  reply(): Buffer {
    let a = 0;
    let b = this.played.length;
    while (a < b && this.played[a] === 0) a++;
    while (b > a && this.played[b - 1] === 0) b--;
    return Buffer.from(Float32Array.from(this.played.slice(a, b)).buffer);
  }
}

t.test('the session and the pipeline: the same turn, the same rows, the same reply bytes', { skip }, async (t) => {
  const dir = scratchDir('voxslab-equal-');
  makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });
  const ask = utterance('What is the weather like in Paris tomorrow?', 'en-us', 165);
  const user = new Float32Array(RATE * 10);
  user.set(ask, RATE);
  const seconds = 10;

  /** The one-thread session on a headset; `skipRows` rows of each segment withheld (the negative control). */
  const viaSession = (skipRows: number) => {
    const domain = MemoryDomain.create({ limit: '2GiB' });
    const model = SpeechModel.load(dir, domain, { outputRate: RATE, replySeconds: 3 });
    const conv = model.conversation({ seed: 7, inputRate: RATE, checkpoints: DuplexSession.checkpointsFor(model) });
    model.ready();
    conv.ready();
    const tokens: number[] = [];
    const turn: number[] = [];
    let rows = 0;
    const listenRows = conv.listenRows.bind(conv);
    conv.listenRows = (r: Float32Array, at: number, n: number) => {
      const skip = Math.max(0, Math.min(n, skipRows - rows));
      rows += n;
      return listenRows(r, at + skip * model.config.frontend.nMels, n - skip);
    };
    const device = new Headset(user);
    const session = new DuplexSession(
      conv,
      device,
      {},
      { text: (token) => tokens.push(token), speechStart: (c) => turn.push(c), speechEnd: (c) => turn.push(c) },
    );
    while (device.clock < seconds * RATE) session.tick();
    session.close();
    return { tokens, turn, rows, turns: session.turns, userFrames: conv.dialogue.userFrames, reply: device.reply() };
  };
  const s = viaSession(0);

  // The pipeline, on the same device, in lockstep.
  const engine = await load(dir, { outputRate: RATE, replySeconds: 3, memoryLimit: '2GiB', pin: 'none' });
  try {
    const c = await engine.open({ inputRate: RATE, seed: 7, vad: true, echoDelayMs: 0 });
    const tokensP: number[] = [];
    const turns: { userFrames: number; frames: number }[] = [];
    c.on('text', (e) => tokensP.push(e.token));
    c.on('turn_end', (s) => turns.push(s));
    const b = new Headset(user);
    await c.run(b, { seconds });
    await c.close();

    t.equal(s.turns, 1, `the session heard one turn (${s.turn.map((x) => (x / RATE).toFixed(2)).join(' → ')} s)`);
    t.equal(turns.length, 1, 'so did the pipeline');
    t.ok(s.rows > ask.length / 160, `the segment's ${s.rows} rows cover the ${Math.round(ask.length / 160)} of the utterance`);
    t.equal(turns[0]?.userFrames, s.userFrames, `the same encoder frames (${s.userFrames})`);
    t.ok(s.tokens.length > 0, `the reply has ${s.tokens.length} text tokens`);
    t.same(tokensP, s.tokens, 'the same text');
    const ra = s.reply;
    const rb = b.reply();
    t.ok(ra.length > 0, `the session played ${ra.length / 4} samples`);
    t.ok(ra.equals(rb), `the same reply bytes (${rb.length / 4} samples from the pipeline)`);
    // Negative control: the comparison sees a single row of the segment.
    const shifted = viaSession(1);
    t.equal(shifted.rows, s.rows, 'the control hears the same segment');
    t.notOk(shifted.reply.equals(rb), 'without its first row, the reply is other bytes');
  } finally {
    await engine.close();
  }
});
