// The duplex core's state machines, driven by recorded sequences: the turn detector, the
// segment gate (the one pre-roll), the barge-in verdict and the fader.
import t from 'tap';
import {
  Endpointer,
  framesOf,
  holdsPlayback,
  VAD_SPEECH_DROP,
  VAD_SPEECH_END,
  VAD_SPEECH_MAYBE,
  VAD_SPEECH_NOT,
  VAD_SPEECH_START,
} from '../../src/duplex/turn.js';
import { GATE_DISCARD, GATE_END, GATE_NONE, GATE_PROVISIONAL, GATE_RESUME, GATE_ROWS, GATE_START, SegmentGate } from '../../src/duplex/gate.js';
import { heardFrames, keptFrames, NO_CUT } from '../../src/duplex/bargein.js';
import { Fader } from '../../src/duplex/fader.js';
import { TURN_TAIL_ROWS, TurnTaking } from '../../src/duplex/turns.js';
import { allocationProbe, prng } from '../helpers.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';

t.test('endpointing: onset, end after silence, short bursts dropped, longest segment', async (t) => {
  // `pause` at `onset`: no SPEECH_MAYBE before the start, so these sequences show the start alone.
  const e = new Endpointer({ onset: 3, pause: 3, silence: 5, minSpeech: 4, maxSegment: 20, warmup: 0 });
  const run = (bits: string): number[] => [...bits].map((b) => e.push(b === '1'));
  const held = new Endpointer({ onset: 3, silence: 5, minSpeech: 4, maxSegment: 20, warmup: 0 });
  t.same(
    [...'0110111'].map((b) => held.push(b === '1')),
    [0, 0, VAD_SPEECH_MAYBE, VAD_SPEECH_NOT, 0, VAD_SPEECH_MAYBE, VAD_SPEECH_START],
    'by default two voiced frames in a row hold playback (SPEECH_MAYBE), taken back when the run breaks',
  );
  t.same(run('0110111'), [0, 0, 0, 0, 0, 0, VAD_SPEECH_START], 'three voiced frames in a row start speech');
  t.equal(e.start, 4, 'at the first of them');
  t.same(run('1100000'), [0, 0, 0, 0, 0, 0, VAD_SPEECH_END], 'five silent frames end it');
  t.same(run('11100000'), [0, 0, VAD_SPEECH_START, 0, 0, 0, 0, VAD_SPEECH_DROP], 'three frames of speech are too short for a turn');
  const w = new Endpointer({ onset: 2, silence: 20, minSpeech: 1, maxSegment: 1000, warmup: 0 });
  const stray = (bits: string): number => {
    w.reset();
    return [...bits].map((b) => w.push(b === '1')).indexOf(VAD_SPEECH_END);
  };
  // Speech starts at frame 1; the window covers the frames after it.
  t.equal(
    stray(`11${'0'.repeat(9)}1${'0'.repeat(9)}1${'0'.repeat(30)}`),
    22,
    'two stray voiced frames among twenty do not restart the wait (it ends at the next unvoiced frame)',
  );
  t.equal(stray(`11000100001000010${'0'.repeat(30)}`), 25, 'three hold it until one slides out');
  t.same(run('111').pop(), VAD_SPEECH_START);
  t.same(run('1'.repeat(17)).pop(), VAD_SPEECH_END, 'the longest segment closes it');
  t.throws(() => new Endpointer({ onset: 0, silence: 5, minSpeech: 4, maxSegment: 20 }), /onset must be a positive whole number/);
  t.equal(framesOf(600), 60);
  const warm = new Endpointer({ onset: 2, silence: 5, minSpeech: 1, maxSegment: 100, warmup: 10 });
  t.same([...'1'.repeat(12)].map(() => warm.push(true)).indexOf(VAD_SPEECH_START), 11, 'decisions in the warm-up are ignored');
});

t.test('playback holds from the first sign of speech until it is taken back or ends', async (t) => {
  const seq = [0, VAD_SPEECH_MAYBE, 0, VAD_SPEECH_NOT, VAD_SPEECH_MAYBE, VAD_SPEECH_START, 0, VAD_SPEECH_END, VAD_SPEECH_START, VAD_SPEECH_DROP];
  const holds: boolean[] = [];
  let h = false;
  for (const e of seq) {
    h = holdsPlayback(e, h);
    holds.push(h);
  }
  t.same(holds, [false, true, true, false, true, true, true, false, true, false]);
});

/**
 * A recorded stream: a voice decision per frame and a row per frame (its value its number), run
 * through a turn detector and a gate, rows and decisions pushed in turns of `rowChunk` and
 * `decisionChunk` (rows at most `ahead` + a chunk before the decisions). Returns what the gate
 * handed out, drained after every push.
 */
function gated(bits: string, rowChunk: number, decisionChunk: number, ahead: number, o: { preRoll: number; maxRows?: number } = { preRoll: 3 }): string[] {
  const ep = new Endpointer({ onset: 2, silence: 4, minSpeech: 3, maxSegment: 1000, warmup: 0 });
  const gate = new SegmentGate({ width: 2, preRoll: o.preRoll, onset: 2, maxRows: o.maxRows ?? 1000, lag: ahead + rowChunk + decisionChunk });
  const out: string[] = [];
  const row = new Float32Array(2);
  const total = bits.length + 8;
  let rows = 0;
  let decided = 0;
  const drain = (): void => {
    for (let g = gate.next(); g !== GATE_NONE; g = gate.next()) {
      if (g === GATE_START) out.push('start');
      else if (g === GATE_END) out.push('end');
      else if (g === GATE_DISCARD) out.push('discard');
      else if (g === GATE_ROWS) for (let k = 0; k < gate.spanRows; k++) out.push(String(gate.ring[(gate.spanAt + k) * 2]));
    }
  };
  const pushRows = (n: number): void => {
    for (const end = Math.min(total, rows + n); rows < end; rows++) {
      row[0] = rows;
      gate.pushRow(row, 0);
    }
    drain();
  };
  pushRows(ahead);
  while (decided < bits.length || rows < total) {
    // Rows never run more than `ahead` + a chunk before the decisions (the gate's `lag`).
    pushRows(decided < bits.length ? Math.min(rowChunk, decided + ahead + rowChunk - rows) : rowChunk);
    // Decisions never run more than a chunk past the rows either: they come from the same audio.
    for (const end = Math.min(bits.length, decided + decisionChunk, Math.max(decided + 1, rows + decisionChunk)); decided < end; decided++) {
      const e = ep.push(bits[decided] === '1');
      gate.frame(e, ep.start);
    }
    drain();
  }
  return out;
}

t.test('segment gate: the pre-roll, the segment through the frame its end was decided at, the same whatever the chunks', async (t) => {
  //            0         1         2         3
  //            0123456789012345678901234567890123456789
  const bits = '000000110111000000000110000000001111000000';
  const want = gated(bits, 1, 1, 0);
  // Speech began at frame 6 (confirmed at 7); the pre-roll is rows 3..5; silence of 4 frames after
  // the last voiced frame (11) ends it at frame 15. The burst at 21 is too short: its rows are
  // discarded. The third starts at 32 (pre-roll 29..31) and ends at 39.
  const range = (a: number, b: number): string[] => Array.from({ length: b - a + 1 }, (_, i) => String(a + i));
  t.same(want, ['start', ...range(3, 15), 'end', 'start', ...range(18, 26), 'discard', 'start', ...range(29, 39), 'end']);
  for (const [rowChunk, decisionChunk, ahead] of [
    [1, 7, 0],
    [7, 1, 3],
    [5, 5, 6],
    [13, 2, 1],
    [40, 40, 0],
    [3, 11, 9],
  ] as const) {
    t.same(gated(bits, rowChunk, decisionChunk, ahead), want, `rows in ${rowChunk}s, decisions in ${decisionChunk}s, rows ${ahead} ahead`);
  }
  // Random chunkings of a longer recording.
  const r = prng(11);
  let long = '';
  for (let i = 0; i < 60; i++) long += (r() < 0.5 ? '0' : '1').repeat(1 + Math.floor(r() * 12));
  const ref = gated(long, 1, 1, 0);
  t.ok(ref.filter((x) => x === 'start').length >= 3, 'the recording has several segments');
  for (let k = 0; k < 20; k++) {
    const [a, b, c] = [1 + Math.floor(r() * 16), 1 + Math.floor(r() * 16), Math.floor(r() * 8)];
    t.same(gated(long, a, b, c), ref, `random chunks ${a}/${b}/${c}`);
  }
});

t.test('segment gate: a pre-roll never reaches back into the segment before; the longest segment is cut', async (t) => {
  // Speech from frame 1 ends at frame 8; the next begins at 11, its pre-roll of 5 would reach row 6: it starts at row 9.
  const out = gated('0111100000011110000000', 1, 1, 0, { preRoll: 5 });
  t.same(out.slice(0, out.indexOf('end') + 2), ['start', '0', '1', '2', '3', '4', '5', '6', '7', '8', 'end', 'start']);
  t.equal(out[out.indexOf('end') + 2], '9', 'the second segment starts where the first ended');
  const cut = gated('0111111111111100000', 1, 1, 0, { preRoll: 0, maxRows: 5 });
  t.same(cut, ['start', '1', '2', '3', '4', '5', 'end'], 'rows past maxRows are dropped, the end still comes');
});

t.test('turn-taking: a turn ended by silence is its speech through the last voiced frame and the tail, whatever the silence', async (t) => {
  // After the 50-frame warm-up: speech from frame 80 with a 20-frame pause, its last voiced frame 159.
  const bits = `${'0'.repeat(80)}${'1'.repeat(40)}${'0'.repeat(20)}${'1'.repeat(20)}${'0'.repeat(150)}`;
  const run = (silenceMs: number, rowsPerPush: number): { rows: number[]; turnRows: number; ends: number } => {
    const turns = new TurnTaking({ onsetMs: 30, silenceMs, minSpeechMs: 100, width: 1, maxRows: 3000, rowsPerPush }, heapWorkspace, heapWorkspace);
    const g = turns.gate;
    const rows: number[] = [];
    let turnRows = -1;
    let ends = 0;
    const row = new Float32Array(1);
    let pushed = 0;
    for (let f = 0; f < bits.length; f++) {
      // Rows run ahead of the decisions by up to a push.
      for (; pushed < Math.min(bits.length, f + rowsPerPush); pushed++) {
        row[0] = pushed;
        g.pushRow(row, 0);
      }
      turns.frame(bits[f] === '1');
      for (let k = g.next(); k !== GATE_NONE; k = g.next()) {
        if (k === GATE_ROWS) for (let r = 0; r < g.spanRows; r++) rows.push(g.ring[g.spanAt + r]!);
        else if (k === GATE_END) {
          turnRows = g.turnRows;
          ends++;
        }
      }
    }
    return { rows, turnRows, ends };
  };
  const want = run(300, 1);
  t.equal(want.ends, 1, 'one turn: the 200 ms pause is shorter than the silence');
  const first = 80 - 30;
  t.equal(want.turnRows, 159 + 1 + TURN_TAIL_ROWS - first, 'from the pre-roll through the last voiced frame and the tail');
  t.ok(want.rows.length > want.turnRows, `rows past the turn were handed out (${want.rows.length}), the turn says where it ends`);
  t.same(
    want.rows.slice(0, want.turnRows),
    Array.from({ length: want.turnRows }, (_, i) => first + i),
  );
  for (const [ms, push] of [
    [600, 1],
    [1000, 1],
    [300, 7],
    [600, 16],
  ] as const) {
    const r = run(ms, push);
    t.equal(r.turnRows, want.turnRows, `silenceMs ${ms}, rows ${push} ahead: the same turn`);
    t.same(r.rows.slice(0, r.turnRows), want.rows.slice(0, want.turnRows));
  }
});

/** Turn-taking with a 200 ms speculation pause over `bits` (one decision per frame, rows 4 ahead): its offers, takebacks and ends. */
function offers(bits: string, hangover: number): { seen: string[]; turns: TurnTaking } {
  const turns = new TurnTaking(
    { onsetMs: 30, silenceMs: 600, speculateMs: 200, minSpeechMs: 100, hangover, width: 1, maxRows: 3000, rowsPerPush: 4 },
    heapWorkspace,
    heapWorkspace,
  );
  const g = turns.gate;
  const seen: string[] = [];
  const row = new Float32Array(1);
  let pushed = 0;
  for (let f = 0; f < bits.length; f++) {
    for (; pushed < Math.min(bits.length, f + 4); pushed++) g.pushRow(row, 0);
    turns.frame(bits[f] === '1');
    for (let k = g.next(); k !== GATE_NONE; k = g.next()) {
      if (k === GATE_PROVISIONAL) seen.push(`offer ${g.turnRows} at ${f}`);
      else if (k === GATE_RESUME) seen.push(`resume at ${f}`);
      else if (k === GATE_END) seen.push(`end ${g.turnRows} at ${f}`);
    }
  }
  return { seen, turns };
}

t.test('turn-taking: a pause offers the turn so far, the rows a silence end would give it; speech that goes on takes it back', async (t) => {
  // Speech from 80, a 30-frame pause (an offer at 20 frames, taken back), speech to 169, then silence (an offer, then the end).
  const bits = `${'0'.repeat(80)}${'1'.repeat(40)}${'0'.repeat(30)}${'1'.repeat(20)}${'0'.repeat(150)}`;
  const { seen } = offers(bits, 0);
  const first = 80 - 30;
  t.same(seen, [
    `offer ${119 + 1 + TURN_TAIL_ROWS - first} at 139`,
    'resume at 150',
    `offer ${169 + 1 + TURN_TAIL_ROWS - first} at 189`,
    `end ${169 + 1 + TURN_TAIL_ROWS - first} at 229`,
  ]);
});

t.test('segment gate: pushing and routing allocate nothing', async (t) => {
  const ep = new Endpointer({ onset: 2, silence: 4, minSpeech: 3, maxSegment: 1000, warmup: 0 });
  const gate = new SegmentGate({ width: 128, preRoll: 30, onset: 2, maxRows: 3000, lag: 16 });
  const row = new Float32Array(128);
  let f = 0;
  const probe = allocationProbe(2000, () => {
    gate.pushRow(row, 0);
    const e = ep.push(f++ % 40 < 20);
    gate.frame(e, ep.start);
    while (gate.next() !== GATE_NONE);
  });
  t.equal(probe.arrayBuffers, 0);
  t.ok(probe.heap < 1024, `heap growth ${probe.heap}`);
});

t.test('barge-in verdict: the frames heard of the reply being delivered, at least the first kept', async (t) => {
  const fs = 1920;
  t.equal(heardFrames(-1, -1, 0, 0, fs), NO_CUT, 'no reply yet');
  t.equal(heardFrames(2, 2, 2, 5000, fs), NO_CUT, 'the reply was cut already');
  t.equal(heardFrames(2, -1, 3, 0, fs), NO_CUT, 'it was delivered to its end before the onset');
  t.equal(heardFrames(2, -1, 1, 9999, fs), 0, 'the listener was still hearing an earlier reply');
  t.equal(heardFrames(2, -1, 2, 5000, fs), 3, '5000 samples touch three frames');
  t.equal(heardFrames(2, -1, 2, 3840, fs), 2);
  t.equal(keptFrames(10, 0), 1, 'the first frame stays');
  t.equal(keptFrames(10, 3), 3);
  t.equal(keptFrames(2, 7), 2, 'no more than were generated');
});

t.test('fader: a hold fades out over fadeMs and back in; a cut silences at once', async (t) => {
  const f = new Fader(1, 10000); // 10 samples
  const gains: number[] = [];
  for (let i = 0; i < 12; i++) {
    f.step(true);
    gains.push(Math.round(f.gain * 10) / 10);
  }
  t.same(gains.slice(0, 11), [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0, 0], 'ten samples down');
  t.equal(f.audible(true), false, 'silent while held at zero');
  t.equal(f.audible(false), true);
  f.step(false);
  t.equal(Math.round(f.gain * 10) / 10, 0.1, 'and back up');
  f.silence();
  t.equal(f.gain, 0);
  t.throws(() => new Fader(0, 16000), /fadeMs must be 1..1000/);
});

t.test("endpointing: a detector's hangover counts as silence once its voiced run ends, in the wait and in the offer", async (t) => {
  // Speech from frame 80 to 119, then the detector's 9 frames of hangover (voiced to 128), then silence.
  const bits = `${'0'.repeat(80)}${'1'.repeat(49)}${'0'.repeat(150)}`;
  const run = (hangover: number): { events: string[]; speechEnd: number; lastVoiced: number } => {
    const { seen, turns } = offers(bits, hangover);
    return { events: seen.filter((e) => !e.startsWith('resume')), speechEnd: turns.endpointer.speechEnd, lastVoiced: turns.endpointer.lastVoiced };
  };
  const rowsThrough = (end: number): number => end + 1 + TURN_TAIL_ROWS - (80 - 30);
  // Without it the hangover is speech: the turn ends a tail after it, the wait runs from its end.
  t.same(run(0).events, [`offer ${rowsThrough(128)} at 148`, `end ${rowsThrough(128)} at 188`]);
  const h = run(9);
  t.equal(h.lastVoiced, 128, 'the last voiced frame is the detector’s');
  t.equal(h.speechEnd, 119, 'the speech ended before its hangover');
  // The turn ends a tail after the speech, and the wait (60 frames) runs from there: 9 frames sooner.
  t.same(h.events, [`offer ${rowsThrough(119)} at 139`, `end ${rowsThrough(119)} at 179`]);
  // A hangover longer than the speculation pause is one too: the offer comes at the pause.
  t.same(run(15).events[0], `offer ${rowsThrough(113)} at ${113 + 20}`);
  // A run shorter than the onset once its hangover is off (a click) neither moves the speech's
  // end nor restarts the wait; the window still counts its one voiced frame.
  const e = new Endpointer({ onset: 2, silence: 20, minSpeech: 1, maxSegment: 1000, warmup: 0 });
  e.hangover = 3;
  const events = [...`111111${'0'.repeat(5)}1111${'0'.repeat(30)}`].map((b) => e.push(b === '1'));
  t.equal(events.indexOf(VAD_SPEECH_END), 2 + 20, 'the speech ended at frame 2 (six voiced, three of them hangover): the turn ends 20 frames on');
});
