import t from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILTIN_CONFIGS, BUILTIN_NAMES, resolveConfig } from '../../src/model/format/config.js';
import { loadConfig } from '../../src/io/config.js';
import { scratchDir } from '../helpers.js';

const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

t.test('production configuration derives the documented dimensions', async (t) => {
  const c = loadConfig('lfm2-audio-1.5b');
  t.same(c.frontend, { sampleRate: 16000, nFft: 512, winLength: 400, hop: 160, nMels: 128 });
  t.match(c.encoder, { layers: 17, d: 512, heads: 8, headDim: 64, ffn: 2048, convKernel: 9, channels: 256, factor: 8, stages: 3, featOut: 16 });
  t.same(c.adapter, { in: 512, hidden: 2048, out: 2048 });
  t.match(c.backbone, { hidden: 2048, heads: 32, kvHeads: 8, headDim: 64, ffn: 8192, convKernel: 3, vocab: 65536, maxContext: 128000 });
  t.equal(c.backbone.layers.join(' '), 'conv conv attention conv conv attention conv conv attention conv attention conv attention conv attention conv');
  t.match(c.depthformer, { layers: 6, dim: 1024, heads: 32, kvHeads: 8, headDim: 32, ffn: 2816 });
  t.match(c.detokenizer, { hidden: 512, heads: 16, kvHeads: 8, headDim: 32, ffn: 2304, window: 30, outBins: 1282, nFft: 1280, hop: 320 });
  t.same(c.interleave, { text: 6, audio: 12 });
  for (const n of BUILTIN_NAMES) t.ok(Object.isFrozen(loadConfig(n)), `${n} is frozen`);
});

t.test('nonsense values are refused with the field path', async (t) => {
  const [main, det] = BUILTIN_CONFIGS.tiny!;
  const cases: [string, (m: Record<string, any>, d: Record<string, any>) => void, RegExp][] = [
    ['zero heads', (m) => (m.encoder.n_heads = 0), /config\.json, field encoder\.n_heads: Too small/],
    ['heads not dividing d', (m) => (m.encoder.n_heads = 3), /field encoder\.n_heads: must divide d_model 64/],
    ['negative context', (m) => (m.lfm.max_position_embeddings = -1), /field lfm\.max_position_embeddings/],
    ['missing encoder', (m) => delete m.encoder, /field encoder:/],
    ['missing layer_types', (m) => delete m.lfm.layer_types, /field lfm\.layer_types/],
    ['unknown layer type', (m) => (m.lfm.layer_types = ['conv', 'mamba']), /field lfm\.layer_types\.1/],
    ['layer count mismatch', (m) => (m.lfm.num_hidden_layers = 9), /field lfm\.num_hidden_layers: is 9 but layer_types has 4/],
    ['kv not dividing heads', (m) => (m.lfm.num_key_value_heads = 3), /field lfm\.num_key_value_heads: must divide/],
    ['string where number', (m) => (m.encoder.d_model = '64'), /field encoder\.d_model/],
    ['even conv kernel', (m) => (m.encoder.conv_kernel_size = 8), /field encoder\.conv_kernel_size: must be odd/],
    ['bad subsampling factor', (m) => (m.encoder.subsampling_factor = 6), /field encoder\.subsampling_factor: must be a power of two/],
    [
      'no ffn size',
      (m) => {
        delete m.lfm.block_ff_dim;
        delete m.lfm.intermediate_size;
      },
      /field lfm\.intermediate_size: intermediate_size or block_ff_dim is required/,
    ],
    ['detokenizer window', (_m, d) => (d.sliding_window = 0), /audio_detokenizer\/config\.json, field sliding_window/],
    ['detokenizer output', (_m, d) => (d.output_size = 1000), /audio_detokenizer\/config\.json, field output_size/],
    ['a billion codebooks', (m) => (m.codebooks = 1e9), /config\.json, field codebooks: Too big/],
    ['a billion encoder layers', (m) => (m.encoder.n_layers = 1e9), /field encoder\.n_layers: Too big/],
    [
      '100,000 layer types',
      (m) => {
        m.lfm.layer_types = new Array(100_000).fill('conv');
        delete m.lfm.num_hidden_layers;
      },
      /field lfm\.layer_types: Too big/,
    ],
    ['a vast vocabulary', (m) => (m.lfm.vocab_size = 2 ** 40), /field lfm\.vocab_size: Too big/],
    ['a vast detokenizer', (_m, d) => (d.hidden_size = 1e7), /audio_detokenizer\/config\.json, field hidden_size: Too big/],
    ['main context missing', (m) => delete m.lfm.max_position_embeddings, /config\.json, field lfm\.max_position_embeddings/],
    // Each field in range, the size derived from them absurd: the field to change is named.
    ['a hop of no samples', (m) => (m.preprocessor.window_stride = 1e-9), /config\.json, field preprocessor\.window_stride: a hop of 0 samples/],
    ['a window of no samples', (m) => (m.preprocessor.window_size = 1e-9), /config\.json, field preprocessor\.window_size: a window of 0 samples/],
    ['a window past n_fft', (m) => (m.preprocessor.window_size = 0.05), /field preprocessor\.window_size: a window of 800 samples is longer than n_fft 512/],
    ['an odd n_fft', (m) => (m.preprocessor.n_fft = 511), /field preprocessor\.n_fft: 511 must be even/],
    ['features the encoder does not take', (m) => (m.preprocessor.features = 80), /field encoder\.feat_in: 128 but the preprocessor makes 80 features/],
    ['an FFN multiplier of 1e9', (m) => (m.lfm.block_ffn_dim_multiplier = 1e9), /field lfm\.block_ffn_dim_multiplier: gives an FFN width of 128000000000/],
    ['heads of one value', (m) => (m.lfm.num_attention_heads = 64), /field lfm\.num_attention_heads: gives heads of 1 values; RoPE needs an even head size/],
    ['odd Depthformer heads', (m) => (m.depthformer.num_attention_heads = 64), /field depthformer\.num_attention_heads: gives heads of 1 values/],
    [
      'odd detokenizer heads',
      (_m, d) => {
        d.num_attention_heads = 64;
        d.num_key_value_heads = 64;
      },
      /audio_detokenizer\/config\.json, field num_attention_heads/,
    ],
  ];
  for (const [what, mutate, pattern] of cases) {
    const m = clone(main) as Record<string, any>;
    const d = clone(det) as Record<string, any>;
    mutate(m, d);
    t.throws(() => resolveConfig('x', m, d), { name: 'BadInputError', message: pattern }, what);
  }
});

t.test('the detokenizer config needs no max_position_embeddings (docs/model.md and docs/checkpoints.md do not list it)', async (t) => {
  for (const name of BUILTIN_NAMES) {
    const [main, det] = BUILTIN_CONFIGS[name]!;
    const d = clone(det) as Record<string, unknown>;
    delete d.max_position_embeddings;
    const c = resolveConfig(name, main, d);
    t.equal(c.detokenizer.hidden, (det as { hidden_size: number }).hidden_size, `${name}: resolves without it`);
  }
});

t.test('configurations load from a checkpoint folder or a config file', async (t) => {
  const dir = scratchDir('voxslab-config-');
  const [main, det] = BUILTIN_CONFIGS.small!;
  mkdirSync(join(dir, 'audio_detokenizer'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(main));
  writeFileSync(join(dir, 'audio_detokenizer', 'config.json'), JSON.stringify(det));
  t.same({ ...loadConfig(dir), name: 'small' }, loadConfig('small'), 'folder');
  t.same({ ...loadConfig(join(dir, 'config.json')), name: 'small' }, loadConfig('small'), 'config.json with the sibling folder');
  const single = join(dir, 'single.json');
  writeFileSync(single, JSON.stringify({ ...main, audio_detokenizer: det }));
  t.same({ ...loadConfig(single), name: 'small' }, loadConfig('small'), 'embedded detokenizer config');
  const lone = scratchDir('voxslab-config-');
  writeFileSync(join(lone, 'config.json'), JSON.stringify(main));
  t.throws(() => loadConfig(join(lone, 'config.json')), /audio_detokenizer\/config\.json: the detokenizer configuration is missing/);
  writeFileSync(join(lone, 'broken.json'), '{"codebooks": 8,');
  t.throws(() => loadConfig(join(lone, 'broken.json')), { name: 'BadInputError', message: /broken\.json: not valid JSON/ });
  t.throws(() => loadConfig('no-such-config'), /not a built-in configuration \(tiny, small, lfm2-audio-1\.5b\)/);
  // Bounded before parsing: a document the parser would need the heap for is refused by its shape.
  const shaped = (name: string, extra: string): string => {
    const f = join(lone, name);
    writeFileSync(f, `${JSON.stringify({ ...main, audio_detokenizer: det }).slice(0, -1)}, "junk": ${extra}}`);
    return f;
  };
  t.throws(() => loadConfig(shaped('deep.json', `${'['.repeat(100_000)}${']'.repeat(100_000)}`)), {
    name: 'BadInputError',
    message: /deep\.json, offset \d+: nested deeper than 16 levels/,
  });
  t.throws(() => loadConfig(shaped('long.json', `"${'x'.repeat(100_000)}"`)), {
    name: 'BadInputError',
    message: /long\.json, offset \d+: a string longer than 65536 bytes/,
  });
  t.throws(() => loadConfig(shaped('wide.json', `[${'0,'.repeat(600_000)}0]`)), {
    name: 'BadInputError',
    message: /wide\.json: the configuration is \d+ bytes; the limit is 1048576/,
  });
  t.throws(() => loadConfig(shaped('many.json', `[${'0,'.repeat(120_000)}0]`)), {
    name: 'BadInputError',
    message: /many\.json, offset \d+: more than 100000 values/,
  });
});
