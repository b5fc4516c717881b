// The public surface: what the root exports, what its declarations show, and the calls a voice
// session offers beyond speaking a turn (clearInput, async disposal).
import t from 'tap';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { scratchDir } from '../helpers.js';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as root from '../../src/index.js';
import { CapacityError, load } from '../../src/index.js';

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

t.test('every event names its turn: memory at open and after each reply, close', async (t) => {
  const engine = await load('tiny', { memoryLimit: '1GiB', replySeconds: 1 });
  const conv = await engine.open({ inputRate: 16000 });
  const memory: { turn: number; held: number }[] = [];
  conv.on('memory', (e) => memory.push({ turn: e.turn, held: e.manifest.totals.current }));
  const closed = new Promise<{ turn: number }>((resolve) => conv.once('close', resolve));
  const speech = Float32Array.from({ length: 16000 }, (_, i) => 0.3 * Math.sin((2 * Math.PI * 220 * i) / 16000));
  for (let k = 0; k < 2; k++) {
    conv.write(speech);
    conv.endTurn();
    await conv.nextTurn();
  }
  t.same(
    memory.map((m) => m.turn),
    [0, 0, 1],
    'the manifest at open (turn 0), then after reply 0 and reply 1',
  );
  t.ok(memory.every((m) => m.held > 0));
  await conv.close();
  t.same(await closed, { turn: 2 }, 'close names the next turn');
  await engine.close();
});

t.test('a stage worker that dies: the error reaches a listener with its turn; the conversation closes', async (t) => {
  const engine = await load('tiny', { memoryLimit: '1GiB', replySeconds: 1 });
  const conv = await engine.open({ inputRate: 16000 });
  const failed = new Promise<[Error, { turn: number }]>((resolve) => conv.once('error', (e, info) => resolve([e, info])));
  await engine.pipeline.workers[2]!.worker.terminate();
  const [error, info] = await failed;
  t.match(error, { name: 'WorkerError', code: 'ERR_VOXSLAB_WORKER' });
  t.same(info, { turn: 0 });
  t.ok(conv.closed, 'the conversation closed');
  await engine.close();
});

t.test('an error nothing receives is thrown, as Node’s emitters do: the process exits with it', async (t) => {
  const index = new URL('../../src/index.js', import.meta.url).href;
  const script = (listen: boolean): string => `
    import { load } from ${JSON.stringify(index)};
    const engine = await load('tiny', { memoryLimit: '1GiB' });
    const conv = await engine.open({ inputRate: 16000 });
    ${listen ? "conv.on('error', (e, i) => console.log('received', e.name, i.turn));" : ''}
    conv.once('close', () => setTimeout(() => engine.close().then(() => console.log('closed')), 100));
    await engine.pipeline.workers[1].worker.terminate();
  `;
  // A file, not --eval: the stage workers inherit the process's exec arguments.
  const dir = scratchDir('voxslab-unhandled-');
  const run = (listen: boolean) => {
    const file = join(dir, `app-${listen}.mjs`);
    writeFileSync(file, script(listen));
    return spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 60_000 });
  };
  const thrown = run(false);
  t.equal(thrown.status, 1, 'no listener: an uncaught exception, exit code 1');
  t.match(thrown.stderr, /Unhandled 'error' event[\s\S]*WorkerError: frontend worker: exited with code 1[\s\S]*Emitted 'error' event on Conversation instance/);
  t.notMatch(thrown.stdout, /closed/);
  const heard = run(true);
  t.equal(heard.status, 0, `a listener: no throw (${heard.stderr.trim()})`);
  t.match(heard.stdout, /received WorkerError 0\nclosed/);
});

t.test('maxConversations sizes the tables: 130 conversations open at once, the 131st refused before anything is carved', async (t) => {
  // Past the 64 a fixed table allowed and past what a default-sized ledger (256 owners) holds.
  const most = 130;
  // A compute capacity above the table's, so the table is what refuses.
  const engine = await load('tiny', { memoryLimit: '1GiB', maxConversations: most, capacity: most + 1 });
  const before = engine.snapshot().held.total;
  const open = [];
  for (let i = 0; i < most; i++) open.push(await engine.open());
  t.equal(engine.conversations, most, `${most} conversations open`);
  const full = await engine.admission();
  t.same([full.bytes, full.compute, full.tables, full.admit], [true, true, false, false], 'admission, asked while full: the tables refuse');
  t.ok(full.planned > 0, `and it still says what one more would cost (${full.planned} bytes)`);
  const held = engine.snapshot().held.total;
  const e = await engine.open().then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(e instanceof CapacityError, `refused with CapacityError: ${(e as Error).message}`);
  t.match((e as Error).message, /at most 130 conversations at once \(maxConversations\); 130 are open/);
  t.equal(engine.snapshot().held.total, held, 'nothing was carved for it');
  await Promise.all(open.map((c) => c.close()));
  t.equal(engine.snapshot().held.total, before, 'every conversation byte back at close');
  await engine.close();
  await t.rejects(load('tiny', { maxConversations: 1025 }), /maxConversations must be/);
});

t.test('a conversation the owner table cannot take is an admission error before anything is carved', async (t) => {
  // A domain with room for the model's and pass slots' owners and two conversations (two owners each).
  const { MemoryDomain } = await import('../../src/memory/index.js');
  const probe = await load('tiny', { memoryLimit: '1GiB' });
  // The model's and the pass slots' owners (the load-time calibration's conversation is closed).
  const fixed = probe.snapshot().owners.filter((o) => !/^(conversation|session)\//.test(o.name)).length;
  await probe.close();
  const domain = MemoryDomain.create({ limit: '1GiB', ownerCapacity: fixed + 4 });
  const engine = await load('tiny', { domain });
  const a = await engine.open();
  const b = await engine.open();
  const held = engine.snapshot().held.total;
  const e = await engine.open().then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(e instanceof CapacityError, `refused with CapacityError: ${(e as Error).message}`);
  t.match((e as Error).message, /owner table is full \(\d+ owners\) with 2 conversations open: conversation 2 needs 2 more/);
  t.equal((e as CapacityError).exitCode, 3);
  t.equal(engine.snapshot().held.total, held, 'nothing was carved for it');
  // A closed conversation's index (and owners) serve the next one.
  await b.close();
  const c = await engine.open();
  t.equal(c.index, 1, 'the freed index is reused');
  await Promise.all([a.close(), c.close()]);
  await engine.close();
});
