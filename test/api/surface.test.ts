// The public surface: what the root exports, what its declarations show, and the calls a voice
// session offers beyond speaking a turn (clearInput, async disposal).
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as root from '../../src/index.js';
import { load } from '../../src/index.js';

t.test('the root exports the product: load, Engine, Conversation and the errors', async (t) => {
  const names = Object.keys(root).sort();
  for (const n of ['load', 'Engine', 'Conversation', 'VoxslabError', 'MemoryLimitError', 'BadInputError', 'exitCodeOf'])
    t.ok(names.includes(n), `exports ${n}`);
  for (const n of ['MemoryDomain', 'native', 'SpeechModel', 'DuplexSession', 'LoopbackDevice', 'plan', 'Ledger'])
    t.notOk(names.includes(n), `does not export ${n}`);
  const devices = await import('../../src/devices.js');
  const reference = await import('../../src/reference.js');
  t.ok('LoopbackDevice' in devices && 'listDevices' in devices, 'devices on voxslab/devices');
  t.ok('SpeechModel' in reference && 'DuplexSession' in reference, 'the one-thread engine on voxslab/reference');
});

t.test('the declarations show no internal member and no test hook', async (t) => {
  const dist = fileURLToPath(new URL('../../src/', import.meta.url));
  const files = (readdirSync(dist, { recursive: true }) as string[]).filter((f) => f.endsWith('.d.ts') && statSync(join(dist, f)).isFile());
  t.ok(files.length > 50, `${files.length} declaration files`);
  const api = ['api/engine.d.ts', 'api/conversation.d.ts', 'api/types.d.ts', 'index.d.ts'].map((f) => readFileSync(join(dist, f), 'utf8')).join('\n');
  t.notMatch(api, /@internal/, 'no @internal member');
  t.notMatch(api, /trapAllocations|replyFrameLimits|loadWithHooks/, 'no test hook');
  t.notMatch(api, /\[kPump\]|\[kFail\]|emitMemory|abortOn/, 'no engine-only call');
  t.match(api, /\[Symbol\.asyncDispose\]\(\): Promise<void>/, 'async disposal is declared');
});

t.test('clearInput drops the speech not yet in the pipeline; async disposal closes', async (t) => {
  const engine = await load('tiny', { memoryLimit: '1GiB', replySeconds: 1 });
  const conv = await engine.open({ inputRate: 16000 });
  const speech = Float32Array.from({ length: 32000 }, (_, i) => 0.3 * Math.sin((2 * Math.PI * 220 * i) / 16000));
  // Half a second goes into the pipeline; then two seconds more are queued and dropped at once.
  conv.write(speech.subarray(0, 8000));
  await new Promise((resolve) => setTimeout(resolve, 200));
  conv.write(speech);
  const dropped = conv.clearInput();
  t.ok(dropped > 0 && dropped <= speech.length, `${dropped} of the ${speech.length} samples just written had not reached the pipeline`);
  t.equal(conv.clearInput(), 0, 'nothing is left to drop');
  // The turn ends and is answered from what reached the pipeline.
  conv.endTurn();
  const turn = await conv.nextTurn();
  t.ok(turn.frames > 0, `the turn was answered (${turn.frames} frames)`);
  await conv[Symbol.asyncDispose]();
  t.ok(conv.closed, 'the conversation is closed');
  t.throws(() => conv.clearInput(), /closed/);
  await engine[Symbol.asyncDispose]();
  t.equal(engine.snapshot().held.total, 0, 'every byte back');
});

t.test('cancelReply stops the reply in progress; the conversation goes on', async (t) => {
  const engine = await load('tiny', { memoryLimit: '1GiB', replySeconds: 6 });
  const conv = await engine.open({ inputRate: 16000 });
  const speech = Float32Array.from({ length: 16000 }, (_, i) => 0.3 * Math.sin((2 * Math.PI * 220 * i) / 16000));
  t.equal(conv.cancelReply(), false, 'no reply owed: nothing to cancel');
  // The whole reply first, for comparison.
  conv.write(speech);
  conv.endTurn();
  const full = await conv.nextTurn();
  t.ok(full.frames > 8, `an uncancelled reply: ${full.frames} frames, stop ${full.stop}`);
  // The same turn again, cancelled at its first audio.
  let audio = 0;
  conv.on('audio', () => {
    if (audio++ === 0) t.equal(conv.cancelReply(), true, 'cancelled at the first audio');
  });
  conv.write(speech);
  conv.endTurn();
  const cut = await conv.nextTurn();
  t.equal(cut.stop, 'interrupted', 'the turn ends interrupted');
  t.ok(cut.frames < full.frames, `it stopped early: ${cut.frames} frames generated`);
  conv.removeAllListeners('audio');
  // The next turn is answered as usual.
  conv.write(speech);
  conv.endTurn();
  const next = await conv.nextTurn();
  t.ok(next.frames > 0, `the next turn is answered (${next.frames} frames)`);
  await engine.close();
  t.equal(engine.snapshot().held.total, 0, 'every byte back');
});
