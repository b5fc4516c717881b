// The audio-only self-conversation gate: two conversations of one engine talk to each other
// through audio alone on a pair of loopback devices (each one's reply, at the device rate, is the
// other's microphone, through capture, resampling, mel and the encoder), on the built artifact.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { scratchDir } from '../helpers.js';
import { apmAvailable } from '../../src/dsp/aec.js';
import { fixture, selfTalk } from './self-talk.js';

const work = scratchDir('voxslab-self-');
const model = join(work, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
const skip = apmAvailable() ? false : 'no WebRTC audio processing';

t.test('two conversations talk to each other through audio alone, repeatable byte for byte, nothing allocated, every byte back', { skip }, async (t) => {
  const one = await selfTalk(model, { exchanges: 3, gain: 1, replySeconds: 2 });
  const replied = one.events.filter((e) => e.includes('replied')).map((e) => e.split(' ')[0]);
  t.same(replied.slice(0, 3), ['A', 'B', 'A'], `A answers the opening line, B answers A, A answers B (${one.events.join(', ')})`);
  t.ok(
    one.events.some((e) => e.startsWith('B hears')),
    'B heard A only through its microphone',
  );
  t.same(one.allocations, [], 'no stage allocated after readiness');
  t.ok(one.back, 'every byte back at close');
  const two = await selfTalk(model, { exchanges: 3, gain: 1, replySeconds: 2 });
  t.ok(
    one.played[0].equals(two.played[0]) && one.played[1].equals(two.played[1]),
    `the same bytes played on both sides (${one.played[0].length} + ${one.played[1].length})`,
  );
  t.same(two.events, one.events, 'the same events at the same device times');
  // Control: with the line between the rooms cut, B never hears anything and only A replies.
  const cut = await selfTalk(model, { exchanges: 1, gain: 0, replySeconds: 2 });
  t.notOk(
    cut.events.some((e) => e.startsWith('B ')),
    `B hears nothing without the line (${cut.events.join(', ')})`,
  );
});

t.test('voxslab talk --self N: the same gate from the command line, the same bytes twice', { skip }, async (t) => {
  const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
  const talk = () =>
    spawnSync(process.execPath, [cli, 'talk', '--model', model, '--self', '2', '--reply', '2', '--loopback', fixture], { encoding: 'utf8', timeout: 300_000 });
  const a = talk();
  t.equal(a.status, 0, `exit 0 (${a.stderr.slice(-300)})`);
  t.match(a.stdout, /\[[\d.]+ s\] A: .*\n\[[\d.]+ s\] B: /, `A replied, then B (${a.stdout.trim()})`);
  const sums = (s: string) => /played sha256 A ([0-9a-f]{64}), B ([0-9a-f]{64})/.exec(s)?.slice(1);
  t.ok(sums(a.stderr), 'the summary names what each side played');
  t.same(sums(talk().stderr), sums(a.stderr), 'a second run played the same bytes');
  const alone = spawnSync(process.execPath, [cli, 'talk', '--model', model, '--self', '2'], { encoding: 'utf8', timeout: 120_000 });
  t.equal(alone.status, 2, 'without the opening line: a usage error');
  t.match(alone.stderr.trim(), /^[^\n]*talk --self needs --loopback USER\.wav[^\n]*$/, 'in one line');
});
