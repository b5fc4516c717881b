// The self-conversation gate for five minutes of device time: two conversations of one engine
// talk to each other through audio alone, on the built artifact. The figures go to the log.
import t from 'tap';
import { join } from 'node:path';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { scratchDir } from '../helpers.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { selfTalk } from './self-talk.js';

const work = scratchDir('voxslab-self-long-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const skip = apmAvailable() ? false : 'no WebRTC audio processing';

t.test('five minutes of self-conversation: the replies keep coming, nothing allocated, every byte back', { skip }, async (t) => {
  const r = await selfTalk(model, { exchanges: Number.MAX_SAFE_INTEGER, gain: 1, replySeconds: 8, seconds: 300 });
  const replied = r.events.filter((e) => e.includes('replied')).map((e) => e.split(' ')[0]);
  t.comment(
    `self-conversation: ${r.seconds} s of device time in ${r.wallSeconds.toFixed(1)} s, ${r.replies} replies ` +
      `(A ${replied.filter((x) => x === 'A').length}, B ${replied.filter((x) => x === 'B').length}), ${r.bargeIns} barge-ins, ${r.underruns} underrun periods`,
  );
  t.equal(r.seconds, 300, 'five minutes of device time');
  t.ok(r.replies >= 20, `${r.replies} replies`);
  t.ok(replied.includes('A') && replied.includes('B'), 'both sides replied');
  t.same(r.allocations, [], 'no stage allocated after readiness');
  t.ok(r.back, 'every byte back at close');
});
