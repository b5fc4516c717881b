import t from 'tap';
import { MemoryDomain } from '../../src/memory/index.js';
import { sizedArenas } from '../../src/memory/sizing.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { SpeechModel } from '../../src/core/conversation.js';
import { carveClocks } from '../../src/core/clock.js';
import { Dialogue, EMIT_DONE, EMIT_TEXT } from '../../src/core/dialogue.js';
import { prng, scratchDir } from '../helpers.js';

const dir = scratchDir('voxslab-barge-');
makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });
const domain = MemoryDomain.create({ limit: '2GiB' });
const model = SpeechModel.load(dir, domain, {});
const c = model.config;
const D = c.backbone.hidden;
const slot = model.slot;
let next = 1;

function dialogue(maxFrames: number, checkpoints: number, m: SpeechModel = model, speculative = false): Dialogue {
  const index = next++;
  const o = m.options;
  return sizedArenas(
    domain,
    [{ owner: domain.owner('conversation', index), name: `dialogue ${index}` }],
    1 << 28,
    ([a]) =>
      new Dialogue(c, a!, {
        context: o.context,
        kv: o.kv,
        prefillChunk: o.prefillChunk,
        maxFrames,
        text: o.text,
        audio: o.audio,
        seed: 5,
        prompts: m.prompts,
        clocks: carveClocks(a!, ''),
        checkpoints,
        speculative,
      }),
  ).value;
}

function userRows(seed: number, frames: number): Float32Array {
  const r = prng(seed);
  return Float32Array.from({ length: frames * D }, () => r() - 0.5);
}

/** One turn: the user's rows, then steps until `until` says stop or the reply ends; what it emitted. */
function turn(d: Dialogue, rows: Float32Array, until: (d: Dialogue) => boolean = () => false, maxFrames?: number, on: typeof slot = slot): number[] {
  d.beginUser(on);
  d.pushRows(on, rows, 0, rows.length / D);
  d.endUser(on, maxFrames);
  const out: number[] = [];
  for (;;) {
    if (until(d)) break;
    const e = d.step(on);
    if (e === EMIT_DONE) break;
    if (e === EMIT_TEXT) out.push(-1 - d.token);
    else out.push(...d.codes);
  }
  return out;
}

/** The conversation's context: positions, short-conv states, live KV rows, sampler, pending frame. */
function context(d: Dialogue): Buffer {
  const s = d.state;
  const parts: Buffer[] = [Buffer.from(Int32Array.of(s.position, d.frames, d.textTokens, d.sampler.state | 0).buffer)];
  for (const conv of s.conv) if (conv !== null) parts.push(Buffer.from(conv.buffer, conv.byteOffset, conv.byteLength));
  const row = c.backbone.kvHeads * c.backbone.headDim;
  for (const k of [...s.k, ...s.v]) if (k !== null) parts.push(Buffer.from(k.buffer, k.byteOffset, s.position * row * k.BYTES_PER_ELEMENT));
  parts.push(Buffer.from(d.codes.buffer, d.codes.byteOffset, d.codes.byteLength));
  return Buffer.concat(parts);
}

t.test('barge-in: the truncated context equals a conversation that only ever generated the heard part', async (t) => {
  const first = userRows(1, 6);
  const second = userRows(2, 5);
  for (const heard of [1, 5, 12, 13]) {
    const lookahead = 8;
    // A runs ahead of the listener by `lookahead` frames, then the listener interrupts.
    const a = dialogue(400, 16);
    const aOut = turn(a, first, (d) => d.frames >= heard + lookahead);
    t.equal(a.frames, heard + lookahead, `A generated ${a.frames} frames`);
    // B's first reply stops by itself right after the heard frame.
    const b = dialogue(400, 0);
    const bOut = turn(b, first, undefined, heard);
    t.same(aOut.slice(0, bOut.length), bOut, `heard ${heard}: B's reply is A's first ${heard} frames and the text before them`);
    t.not(context(a).equals(context(b)), true, 'before truncation the contexts differ (negative control)');
    t.equal(a.truncate(heard), true, `truncate to frame ${heard}`);
    t.equal(a.stop, 'interrupted');
    t.equal(context(a).equals(context(b)), true, `heard ${heard}: the same context, byte for byte (position ${a.position})`);
    // The next turn is the same, emission for emission.
    const a2 = turn(a, second);
    const b2 = turn(b, second);
    t.same(a2, b2, `heard ${heard}: the next reply is the same (${a2.length} values)`);
    t.equal(context(a).equals(context(b)), true, 'and so is the context after it');
  }
});

t.test('speculation: a turn and its reply generated ahead, rolled back, leave the context as it was, byte for byte', async (t) => {
  const first = userRows(6, 5);
  const ahead = userRows(7, 4);
  const real = userRows(8, 9);
  for (const until of [1, 3, 400]) {
    const a = dialogue(until === 400 ? 6 : 400, 16, model, true);
    const b = dialogue(until === 400 ? 6 : 400, 16);
    t.same(turn(a, first), turn(b, first), 'the same first turn');
    const before = context(a);
    a.mark();
    const out = turn(a, ahead, (d) => d.frames >= until);
    t.ok(out.length > 0 && !context(a).equals(before), `a turn staged and ${a.frames} frames ahead change the context (negative control)`);
    a.rollback();
    t.equal(
      context(a).equals(before),
      true,
      `rolled back after ${until === 400 ? 'the whole reply' : `${until} frames`}: the context before the mark, byte for byte`,
    );
    t.same(turn(a, real), turn(b, real), 'the next turn is the one the other dialogue gives');
    t.equal(context(a).equals(context(b)), true, 'and so is the context after it');
  }
  const a = dialogue(400, 4, model, true);
  t.throws(() => a.rollback(), /rollback without a mark/);
  t.throws(() => dialogue(400, 4).mark(), /mark outside a speculative dialogue/);
  t.equal(a.fits(4, 8), false, 'not before the system prompt has run (it is staged with the first turn)');
  turn(a, first);
  t.equal(a.fits(4, 8), true, 'a short turn fits');
  t.equal(a.fits(a.state.context, 0), false, 'a turn as long as the context would be compacted: it cannot be rolled back');
});

t.test('barge-in: a frame older than the checkpoints kept cannot be returned to', async (t) => {
  const a = dialogue(400, 4);
  turn(a, userRows(3, 4), (d) => d.frames >= 10);
  const before = context(a);
  t.equal(a.truncate(5), false, 'frame 5 is six frames back; four are kept');
  t.equal(a.truncate(11), false, 'frame 11 was never generated');
  t.equal(a.truncate(0), false, 'frame 0 is not a frame');
  t.equal(context(a).equals(before), true, 'a refused truncation changes nothing');
  t.equal(a.truncate(7), true, 'frame 7 is kept');
  t.throws(() => dialogue(10, -1), /checkpoints must be 0\.\.4096/);
});

t.test('a user turn whose staged positions end exactly on a prefill chunk is answered as any other', async (t) => {
  // Two models on the same checkpoint that differ only in the prefill chunk.
  const chunk = model.options.prefillChunk;
  const other = SpeechModel.load(dir, domain, { prefillChunk: chunk - 1 });
  const p = model.prompts;
  const staged = p.system.length + p.userOpen.length + p.userClose.length;
  const frames = Math.ceil((staged + 1) / chunk) * chunk - staged;
  t.equal((staged + frames) % chunk, 0, `${staged} prompt positions and ${frames} frames fill whole chunks of ${chunk}`);
  const rows = userRows(5, frames);
  const a = dialogue(8, 0);
  const out = turn(a, rows);
  t.ok(out.length > 0, `answered: ${out.length} values`);
  // The same turn prefilled in chunks of chunk − 1 (its last chunk runs at the first step).
  const ref = turn(dialogue(8, 0, other), rows, undefined, undefined, other.slot);
  t.same(out, ref, 'the same reply as with another chunk size');
});

t.test('the system prompt runs when the conversation opens; the first turn prefills only its own rows, with the same bits', async (t) => {
  // Chunks shorter than the system prompt: it runs over several calls (polls of the stage).
  const m = SpeechModel.load(dir, domain, { prefillChunk: 8 });
  const chunk = m.options.prefillChunk;
  const p = m.prompts;
  const system = p.system.length;
  t.ok(system > chunk, `the system prompt (${system} positions) spans several chunks of ${chunk}`);
  const rows = userRows(6, 5);
  const own = p.userOpen.length + 5 + p.userClose.length;
  /** A turn on `m`; what it emitted and the positions its prefill ran (the first step runs them). */
  const first = (d: Dialogue): { out: number[]; prefilled: number } => {
    const before = d.state.position;
    let seen = 0;
    let prefilled = -1;
    const out = turn(
      d,
      rows,
      (x) => {
        if (seen++ === 1) prefilled = x.state.position - before;
        return false;
      },
      undefined,
      m.slot,
    );
    return { out, prefilled };
  };

  // Negative control: a dialogue that opens nothing prefills the system prompt with its first turn.
  const late = dialogue(30, 0, m);
  t.equal(late.systemDone, false);
  const lateFirst = first(late);
  t.equal(lateFirst.prefilled, system + own, `without it, the first turn runs ${lateFirst.prefilled} positions`);

  const early = dialogue(30, 0, m);
  let calls = 1;
  while (!early.prefillSystem(m.slot)) calls++;
  t.equal(calls, Math.ceil(system / chunk), 'a chunk per call');
  t.equal(early.state.position, system, 'the system prompt has run');
  t.equal(early.prefillSystem(m.slot), true, 'a further call does nothing');
  t.equal(early.state.position, system);
  const earlyFirst = first(early);
  t.equal(earlyFirst.prefilled, own, `the first turn runs its own ${own} positions`);
  t.same(earlyFirst.out, lateFirst.out, `the same reply (${earlyFirst.out.length} values)`);
  t.equal(context(early).equals(context(late)), true, 'the same context, byte for byte');
  const second = userRows(7, 4);
  t.same(turn(early, second, undefined, undefined, m.slot), turn(late, second, undefined, undefined, m.slot), 'the same second reply');
  t.equal(context(early).equals(context(late)), true, 'and the same context after it');

  // Partly run at open: the first turn runs the rest.
  const part = dialogue(30, 0, m);
  t.equal(part.prefillSystem(m.slot), false);
  const partFirst = first(part);
  t.equal(partFirst.prefilled, system - chunk + own, 'the rest of the system prompt runs with the first turn');
  t.same(partFirst.out, lateFirst.out, 'with the same reply');
  t.equal(part.systemDone, true);
});

t.test('a dialogue copies the system prompt another ran: the same context, reply and next turn, f32 and f16 caches', async (t) => {
  for (const kv of ['f32', 'f16'] as const) {
    // Chunks shorter than the system prompt: the donor is part way through it for a while.
    const m = SpeechModel.load(dir, domain, { prefillChunk: 8, kv });
    const system = m.prompts.system.length;
    const donor = dialogue(30, 0, m);
    const copy = dialogue(30, 0, m);
    const own = dialogue(30, 0, m);
    t.equal(copy.copySystem(donor), false, `${kv}: nothing to copy before the donor has run it`);
    t.equal(donor.prefillSystem(m.slot), false);
    t.equal(donor.systemRunning, true);
    t.equal(copy.copySystem(donor), false, 'nor while it is part way through');
    while (!donor.prefillSystem(m.slot));
    t.equal(donor.systemSaved, true);
    t.equal(copy.copySystem(donor), true, 'copied once the donor has run it');
    t.equal(copy.systemDone, true);
    t.equal(copy.state.position, system);
    while (!own.prefillSystem(m.slot));
    t.equal(context(copy).equals(context(own)), true, 'the same context as running it, byte for byte');
    const rows = userRows(8, 5);
    const reply = turn(own, rows, undefined, undefined, m.slot);
    t.same(turn(donor, rows, undefined, undefined, m.slot), reply, 'the donor answers as a dialogue that ran it');
    // The donor has moved on (and its short-conv states with it): what it gives is the prompt's end.
    const later = dialogue(30, 0, m);
    t.equal(later.copySystem(donor), true, 'a donor past its first turn still gives the prompt');
    t.equal(later.copySystem(donor), false, 'a dialogue that holds positions refuses a copy');
    t.same(turn(copy, rows, undefined, undefined, m.slot), reply, 'the same reply after a copy');
    t.same(turn(later, rows, undefined, undefined, m.slot), reply, 'and after a copy from a donor that had moved on');
    t.equal(context(later).equals(context(own)), true, 'the same context after the turn');
    const next = userRows(9, 3);
    t.same(turn(later, next, undefined, undefined, m.slot), turn(own, next, undefined, undefined, m.slot), 'the same second reply');
  }
});

t.test('a conversation is ready with its system prompt run', async (t) => {
  const conv = model.conversation({ seed: 1, inputRate: 16000 });
  t.equal(conv.backbone.position, 0);
  conv.ready();
  t.equal(conv.backbone.position, model.prompts.system.length);
  t.equal(conv.dialogue.systemDone, true);
});
