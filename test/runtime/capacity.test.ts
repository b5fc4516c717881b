// Compute admission's arithmetic: a frame of n conversations from the calibration's points.
import t from 'tap';
import { capacityFrom, frameCostMs, HEADROOM } from '../../src/runtime/capacity.js';

const c = { rows: [1, 2, 4, 8, 16], frameMs: [10, 12, 16, 24, 40], periodMs: 80 };

t.test('a frame of n conversations: measured points, lines between them, full calls of the widest beyond', async (t) => {
  t.equal(frameCostMs(c, 0), 0);
  t.equal(frameCostMs(c, 1), 10);
  t.equal(frameCostMs(c, 3), 14, 'halfway between 2 and 4');
  t.equal(frameCostMs(c, 16), 40);
  t.equal(frameCostMs(c, 20), 40 + 16, 'one full call and a call of 4');
  t.equal(frameCostMs(c, 33), 2 * 40 + 10, 'two full calls and one of 1');
  t.equal(frameCostMs({ rows: [], frameMs: [] }, 5), 0, 'no calibration: nothing predicted');
});

t.test('capacity: the most conversations whose frame fits the headroom, at least one', async (t) => {
  t.equal(HEADROOM * c.periodMs, 64);
  // 24: one call of 16 (40) and one of 8 (24) is 64; 25 needs 66.
  t.equal(capacityFrom(c, 64), 24);
  t.equal(capacityFrom({ ...c, frameMs: [100, 120, 160, 240, 400] }, 64), 1, 'too slow for one: one still');
  t.equal(capacityFrom({ ...c, frameMs: [0.1, 0.1, 0.2, 0.3, 0.5] }, 64), 64, 'at most the engine’s conversations');
  t.equal(capacityFrom({ ...c, frameMs: [0.1, 0.1, 0.2, 0.3, 0.5] }, 300), 300, 'as many as maxConversations allows');
});
