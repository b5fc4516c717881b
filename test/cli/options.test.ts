import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { defaultOf, OPTIONS, optionValue, type OptionKey } from '../../src/options.js';

import { planPipeline } from '../../src/runtime/plan.js';
import { resolveSpeechOptions } from '../../src/core/conversation.js';
import { loadConfig } from '../../src/io/config.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000 });

t.test('the planner and the runtime resolve the same defaults and limits from one table', async (t) => {
  for (const name of ['tiny', 'small', 'lfm2-audio-1.5b']) {
    const config = loadConfig(name);
    const planned = planPipeline({ config, dtype: 'f32' }).options as Record<string, unknown>;
    const runtime = resolveSpeechOptions(config, {});
    for (const k of ['context', 'segmentSeconds', 'replySeconds', 'kv', 'prefillChunk', 'outputRate'] as const) {
      t.equal(planned[k], runtime[k], `${name}: ${k} defaults agree`);
      t.equal(runtime[k], defaultOf(k, { maxContext: config.backbone.maxContext }), `${name}: ${k} is the table's default`);
    }
    t.equal(runtime.context, Math.min(config.backbone.maxContext, 8192));
    // The same out-of-range values are refused by both, with the same message.
    for (const [k, v] of [
      ['context', config.backbone.maxContext + 1],
      ['prefillChunk', 1],
      ['outputRate', 7999],
      ['segmentSeconds', 601],
      ['replySeconds', 0],
    ] as const) {
      const message = (() => {
        try {
          optionValue(k, v, { maxContext: config.backbone.maxContext });
          return '';
        } catch (e) {
          return (e as Error).message;
        }
      })();
      t.not(message, '', `${k} = ${v} is out of range`);
      t.throws(() => planPipeline({ config, dtype: 'f32' }, { [k]: v }), { name: 'ArgumentError', message }, `plan refuses ${k} = ${v}`);
      t.throws(() => resolveSpeechOptions(config, { [k]: v }), { name: 'ArgumentError', message }, `runtime refuses ${k} = ${v}`);
    }
  }
});

t.test('run --help lists every option with its default and range from the table', async (t) => {
  const r = voxslab('run', '--help');
  t.equal(r.status, 0, r.stderr);
  const keys: OptionKey[] = ['outputRate', 'seed', 'segmentSeconds', 'replySeconds', 'threads', 'kv', 'engine', 'slots', 'context'];
  for (const k of keys) {
    const s = OPTIONS[k];
    const block = r.stdout.split(/\n(?= {2}--)/).find((b) => b.startsWith(`  --${s.flag} `));
    t.ok(block !== undefined, `--${s.flag} is listed`);
    const flat = (block ?? '').replace(/\s+/g, ' ');
    if (s.kind === 'int' && typeof s.max === 'number') t.match(flat, `${s.min}–${s.max}`, `--${s.flag} shows its range`);
    if ('default' in s && typeof s.default !== 'function' && s.default !== undefined) t.match(flat, `default ${s.default}`, `--${s.flag} shows its default`);
  }
});

t.test('every usage mistake exits 2 with one line and no stack trace', async (t) => {
  for (const args of [
    ['run', '--model'],
    ['run', '--model', 'tiny', '--in', 'a.wav', '--out', 'b.wav', '--rate', '-1'],
    ['run', '--model', 'tiny', '--in', 'a.wav', '--out', 'b.wav', '--realtime=1'],
    ['run', '--model', 'tiny', '--in', 'a.wav', '--out', 'b.wav', '--rate', '7999'],
    ['plan', '--config', 'tiny', '--slots', '9'],
    ['resample', '--in', 'a.wav', '--out', 'b.wav'],
  ]) {
    const r = voxslab(...args);
    t.equal(r.status, 2, `voxslab ${args.join(' ')} exits 2`);
    t.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr.trim()}`);
    t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
});
