/**
 * Model configurations. A checkpoint's `config.json` (liquid-audio keys) and its
 * `audio_detokenizer/config.json` (an Lfm2Config) are validated with zod and resolved into one
 * normalised `ModelConfig` with every derived dimension. Built-in configurations (`tiny`,
 * `small`, `lfm2-audio-1.5b`) are written in the same checkpoint form, so a real checkpoint's
 * files and the built-ins go through the same code.
 */
import { z } from 'zod';
import { BadInputError } from '../../errors.js';

const posInt = z.number().int().positive();
const posNum = z.number().positive();
/**
 * A dimension with a sane upper bound (well above any real checkpoint's), so a configuration
 * from a small file cannot ask for unbounded memory or time before the planner sees it.
 */
const upTo = (max: number) => posInt.max(max);
const K = 1024;

// One object per document (no intersections: merging two parsed objects fails on values that
// are not equal to themselves, such as NaN, with an untyped error).
const LFM2_FIELDS = {
  hidden_size: upTo(16 * K),
  num_attention_heads: upTo(256),
  num_key_value_heads: upTo(256),
  num_hidden_layers: upTo(256).optional(),
  layer_types: z
    .array(z.enum(['conv', 'full_attention', 'sliding_attention']))
    .min(1)
    .max(256),
  conv_L_cache: upTo(64).default(3),
  conv_bias: z.boolean().default(false),
  vocab_size: upTo(1024 * K),
  // The backbone's context; the detokenizer's config need not carry it (docs/model.md, docs/checkpoints.md).
  max_position_embeddings: upTo(1024 * K).optional(),
  rope_theta: posNum.default(1_000_000),
  norm_eps: posNum.default(1e-5),
  intermediate_size: upTo(128 * K).optional(),
  block_ff_dim: upTo(128 * K).optional(),
  block_multiple_of: upTo(4 * K).default(256),
  block_ffn_dim_multiplier: posNum.default(1),
  block_auto_adjust_ff_dim: z.boolean().default(true),
  sliding_window: upTo(1024 * K).optional(),
};

function lfm2Checks(c: z.output<z.ZodObject<typeof LFM2_FIELDS>>, ctx: z.RefinementCtx): void {
  if (c.hidden_size % c.num_attention_heads !== 0) {
    ctx.addIssue({ code: 'custom', path: ['num_attention_heads'], message: `must divide hidden_size ${c.hidden_size}` });
  }
  if (c.num_attention_heads % c.num_key_value_heads !== 0) {
    ctx.addIssue({ code: 'custom', path: ['num_key_value_heads'], message: `must divide num_attention_heads ${c.num_attention_heads}` });
  }
  if (c.num_hidden_layers !== undefined && c.num_hidden_layers !== c.layer_types.length) {
    ctx.addIssue({ code: 'custom', path: ['num_hidden_layers'], message: `is ${c.num_hidden_layers} but layer_types has ${c.layer_types.length} entries` });
  }
  if (c.intermediate_size === undefined && c.block_ff_dim === undefined) {
    ctx.addIssue({ code: 'custom', path: ['intermediate_size'], message: 'intermediate_size or block_ff_dim is required' });
  }
}

const Lfm2Schema = z.looseObject(LFM2_FIELDS).superRefine(lfm2Checks);

const MainSchema = z.looseObject({
  codebooks: upTo(64).default(8),
  interleaved_n_text: upTo(256).default(6),
  interleaved_n_audio: upTo(256).default(12),
  preprocessor: z.looseObject({
    sample_rate: upTo(384_000),
    window_size: posNum.max(1),
    window_stride: posNum.max(1),
    n_fft: upTo(16 * K),
    features: upTo(K),
  }),
  encoder: z
    .looseObject({
      feat_in: upTo(K),
      n_layers: upTo(256),
      d_model: upTo(8 * K),
      subsampling: z.literal('dw_striding'),
      subsampling_factor: upTo(64).refine((f) => f >= 2 && (f & (f - 1)) === 0, 'must be a power of two of at least 2'),
      subsampling_conv_channels: upTo(8 * K),
      ff_expansion_factor: upTo(16),
      self_attention_model: z.literal('rel_pos'),
      n_heads: upTo(256),
      conv_kernel_size: upTo(255).refine((k) => k % 2 === 1, 'must be odd'),
    })
    .superRefine((e, ctx) => {
      if (e.d_model % e.n_heads !== 0) ctx.addIssue({ code: 'custom', path: ['n_heads'], message: `must divide d_model ${e.d_model}` });
    }),
  lfm: z.looseObject({ ...LFM2_FIELDS, max_position_embeddings: upTo(1024 * K) }).superRefine(lfm2Checks),
  depthformer: z
    .looseObject({
      layers: upTo(64),
      dim: upTo(8 * K),
      tie: z.boolean().default(true),
      num_attention_heads: upTo(256).default(32),
      num_key_value_heads: upTo(256).default(8),
      multiple_of: upTo(4 * K).default(256),
      intermediate_size: upTo(128 * K).optional(),
    })
    .superRefine((d, ctx) => {
      if (d.dim % d.num_attention_heads !== 0) ctx.addIssue({ code: 'custom', path: ['num_attention_heads'], message: `must divide dim ${d.dim}` });
      if (d.num_attention_heads % d.num_key_value_heads !== 0) {
        ctx.addIssue({ code: 'custom', path: ['num_key_value_heads'], message: `must divide num_attention_heads ${d.num_attention_heads}` });
      }
    }),
});

const DetokenizerSchema = z.looseObject({ ...LFM2_FIELDS, sliding_window: upTo(1024 * K), output_size: z.literal(1282) }).superRefine(lfm2Checks);

export type MainConfigJson = z.input<typeof MainSchema>;
export type DetokenizerConfigJson = z.input<typeof DetokenizerSchema>;

export type LayerKind = 'conv' | 'attention';

/** Shape of an LFM2 layer stack (the backbone's or the detokenizer's). */
export interface Lfm2Shape {
  hidden: number;
  layers: readonly LayerKind[];
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  convKernel: number;
  ropeTheta: number;
}

/** The normalised configuration: every dimension the runtime and the planner use. */
export interface ModelConfig {
  readonly name: string;
  readonly frontend: { sampleRate: number; nFft: number; winLength: number; hop: number; nMels: number };
  readonly encoder: {
    layers: number;
    d: number;
    heads: number;
    headDim: number;
    ffn: number;
    convKernel: number;
    channels: number;
    factor: number;
    /** Stride-2 stages in the subsampling (log2 factor). */
    stages: number;
    featIn: number;
    /** Frequency bins left after subsampling (128 → 16). */
    featOut: number;
  };
  readonly adapter: { in: number; hidden: number; out: number };
  readonly backbone: Lfm2Shape & { vocab: number; maxContext: number };
  readonly audio: { codebooks: number; codes: number };
  readonly interleave: { text: number; audio: number };
  readonly depthformer: { layers: number; dim: number; heads: number; kvHeads: number; headDim: number; ffn: number };
  readonly detokenizer: Lfm2Shape & {
    window: number;
    outBins: number;
    nFft: number;
    hop: number;
    sampleRate: number;
    upsample: number;
    codes: number;
  };
}

/** LFM2 FFN width rule (`lfm2_ffn_dim`). */
function lfm2Ffn(c: z.output<typeof Lfm2Schema>): number {
  const ff = (c.block_ff_dim ?? c.intermediate_size) as number;
  if (!c.block_auto_adjust_ff_dim) return ff;
  const m = c.block_multiple_of;
  return m * Math.ceil(Math.trunc(c.block_ffn_dim_multiplier * Math.trunc((2 * ff) / 3)) / m);
}

function halve(f: number, times: number): number {
  let x = f;
  for (let i = 0; i < times; i++) x = Math.floor((x - 1) / 2) + 1;
  return x;
}

function parse<T extends z.ZodType>(schema: T, raw: unknown, file: string, prefix: string): z.output<T> {
  const r = schema.safeParse(raw);
  if (r.success) return r.data;
  const issue = r.error.issues[0] as z.core.$ZodIssue;
  const path = [prefix, ...issue.path.map(String)].filter((p) => p !== '').join('.');
  throw new BadInputError({ file, field: path === '' ? '(root)' : path }, issue.message);
}

/** Validates the two config documents and derives every dimension. */
export function resolveConfig(
  name: string,
  main: unknown,
  detokenizer: unknown,
  files: { main: string; detokenizer: string } = { main: `${name}/config.json`, detokenizer: `${name}/audio_detokenizer/config.json` },
): ModelConfig {
  const m = parse(MainSchema, main, files.main, '');
  const d = parse(DetokenizerSchema, detokenizer, files.detokenizer, '');
  const sr = m.preprocessor.sample_rate;
  const e = m.encoder;
  const stages = Math.log2(e.subsampling_factor);
  const kinds = (types: readonly string[]): LayerKind[] => types.map((t) => (t === 'conv' ? 'conv' : 'attention'));
  const dh = d.hidden_size / d.num_attention_heads;
  const df = m.depthformer;
  return checkDerived(
    files,
    Object.freeze({
      name,
      frontend: Object.freeze({
        sampleRate: sr,
        nFft: m.preprocessor.n_fft,
        winLength: Math.round(m.preprocessor.window_size * sr),
        hop: Math.round(m.preprocessor.window_stride * sr),
        nMels: m.preprocessor.features,
      }),
      encoder: Object.freeze({
        layers: e.n_layers,
        d: e.d_model,
        heads: e.n_heads,
        headDim: e.d_model / e.n_heads,
        ffn: e.d_model * e.ff_expansion_factor,
        convKernel: e.conv_kernel_size,
        channels: e.subsampling_conv_channels,
        factor: e.subsampling_factor,
        stages,
        featIn: e.feat_in,
        featOut: halve(e.feat_in, stages),
      }),
      adapter: Object.freeze({ in: e.d_model, hidden: m.lfm.hidden_size, out: m.lfm.hidden_size }),
      backbone: Object.freeze({
        hidden: m.lfm.hidden_size,
        layers: Object.freeze(kinds(m.lfm.layer_types)),
        heads: m.lfm.num_attention_heads,
        kvHeads: m.lfm.num_key_value_heads,
        headDim: m.lfm.hidden_size / m.lfm.num_attention_heads,
        ffn: lfm2Ffn(m.lfm),
        convKernel: m.lfm.conv_L_cache,
        vocab: m.lfm.vocab_size,
        maxContext: m.lfm.max_position_embeddings,
        ropeTheta: m.lfm.rope_theta,
      }),
      audio: Object.freeze({ codebooks: m.codebooks, codes: 2049 }),
      interleave: Object.freeze({ text: m.interleaved_n_text, audio: m.interleaved_n_audio }),
      depthformer: Object.freeze({
        layers: df.layers,
        dim: df.dim,
        heads: df.num_attention_heads,
        kvHeads: df.num_key_value_heads,
        headDim: df.dim / df.num_attention_heads,
        ffn: df.intermediate_size ?? df.multiple_of * Math.ceil(Math.trunc((8 * df.dim) / 3) / df.multiple_of),
      }),
      detokenizer: Object.freeze({
        hidden: d.hidden_size,
        layers: Object.freeze(kinds(d.layer_types)),
        heads: d.num_attention_heads,
        kvHeads: d.num_key_value_heads,
        headDim: dh,
        ffn: lfm2Ffn(d),
        convKernel: d.conv_L_cache,
        window: d.sliding_window,
        outBins: d.output_size,
        nFft: 1280,
        hop: 320,
        sampleRate: 24000,
        upsample: 6,
        codes: 2048,
        ropeTheta: d.rope_theta,
      }),
    }),
  );
}

/** The widest FFN a derived width may reach (a bound, as `upTo`'s). */
const MAX_FFN = 128 * K;

/**
 * Sizes derived from several fields are checked here, each naming the field to change: every
 * field may be in range while their product is not (a 0-sample hop, an odd RoPE head, an FFN
 * multiplier of 1e9), and nothing downstream should see such a size.
 */
function checkDerived(files: { main: string; detokenizer: string }, c: ModelConfig): ModelConfig {
  const bad = (file: string, field: string, reason: string): never => {
    throw new BadInputError({ file, field }, reason);
  };
  const f = c.frontend;
  if (f.winLength < 1) bad(files.main, 'preprocessor.window_size', `a window of ${f.winLength} samples at ${f.sampleRate} Hz; it must hold at least one`);
  if (f.hop < 1) bad(files.main, 'preprocessor.window_stride', `a hop of ${f.hop} samples at ${f.sampleRate} Hz; it must be at least one`);
  if (f.nFft % 2 !== 0 || f.nFft < 2) bad(files.main, 'preprocessor.n_fft', `${f.nFft} must be even`);
  if (f.winLength > f.nFft) bad(files.main, 'preprocessor.window_size', `a window of ${f.winLength} samples is longer than n_fft ${f.nFft}`);
  if (f.nMels !== c.encoder.featIn) bad(files.main, 'encoder.feat_in', `${c.encoder.featIn} but the preprocessor makes ${f.nMels} features`);
  // RoPE rotates pairs of a head's values.
  const heads: [string, string, number][] = [
    [files.main, 'lfm.num_attention_heads', c.backbone.headDim],
    [files.main, 'depthformer.num_attention_heads', c.depthformer.headDim],
    [files.detokenizer, 'num_attention_heads', c.detokenizer.headDim],
  ];
  for (const [file, field, dim] of heads) if (dim % 2 !== 0) bad(file, field, `gives heads of ${dim} values; RoPE needs an even head size`);
  const ffns: [string, string, number][] = [
    [files.main, 'lfm.block_ffn_dim_multiplier', c.backbone.ffn],
    [files.main, 'depthformer.intermediate_size', c.depthformer.ffn],
    [files.detokenizer, 'block_ffn_dim_multiplier', c.detokenizer.ffn],
  ];
  for (const [file, field, ffn] of ffns) {
    if (!Number.isSafeInteger(ffn) || ffn < 1 || ffn > MAX_FFN) bad(file, field, `gives an FFN width of ${ffn}; it must be from 1 to ${MAX_FFN}`);
  }
  return c;
}

const PREPROCESSOR = {
  sample_rate: 16000,
  normalize: 'per_feature',
  window_size: 0.025,
  window_stride: 0.01,
  window: 'hann',
  features: 128,
  n_fft: 512,
  log: true,
  frame_splicing: 1,
  dither: 1e-5,
  pad_to: 0,
  pad_value: 0.0,
};

function encoder(layers: number, d: number, heads: number, channels: number) {
  return {
    feat_in: 128,
    feat_out: -1,
    n_layers: layers,
    d_model: d,
    subsampling: 'dw_striding' as const,
    subsampling_factor: 8,
    subsampling_conv_channels: channels,
    causal_downsampling: false,
    ff_expansion_factor: 4,
    self_attention_model: 'rel_pos' as const,
    n_heads: heads,
    att_context_size: [-1, -1],
    xscaling: false,
    untie_biases: true,
    pos_emb_max_len: 5000,
    conv_kernel_size: 9,
    conv_norm_type: 'batch_norm',
  };
}

function lfm2(hidden: number, types: string[], heads: number, kv: number, ff: number, vocab: number, context: number) {
  return {
    model_type: 'lfm2',
    hidden_size: hidden,
    num_hidden_layers: types.length,
    layer_types: types as ('conv' | 'full_attention' | 'sliding_attention')[],
    num_attention_heads: heads,
    num_key_value_heads: kv,
    block_ff_dim: ff,
    intermediate_size: ff,
    block_multiple_of: 256,
    block_ffn_dim_multiplier: 1.0,
    block_auto_adjust_ff_dim: true,
    conv_L_cache: 3,
    conv_bias: false,
    vocab_size: vocab,
    max_position_embeddings: context,
    rope_theta: 1_000_000,
    norm_eps: 1e-5,
  };
}

const C = 'conv';
const A = 'full_attention';
const S = 'sliding_attention';

/** The keys every built-in shares: the LFM2-Audio generation layout and frontend. */
const AUDIO_MODEL = {
  architectures: ['LFM2AudioModel'],
  codebooks: 8,
  tie_audio_embeddings: true,
  interleaved_n_text: 6,
  interleaved_n_audio: 12,
  preprocessor: PREPROCESSOR,
};

/** Built-in configurations, in checkpoint form: [config.json, audio_detokenizer/config.json]. */
export const BUILTIN_CONFIGS: Readonly<Record<string, readonly [MainConfigJson, DetokenizerConfigJson]>> = Object.freeze({
  // Tests: a whole conversation in well under a second.
  tiny: [
    {
      ...AUDIO_MODEL,
      encoder: encoder(2, 64, 2, 32),
      lfm: { ...lfm2(64, [C, A, C, A], 4, 2, 192, 256, 4096), block_multiple_of: 32 },
      depthformer: { layers: 1, dim: 64, tie: true, num_attention_heads: 4, num_key_value_heads: 2, multiple_of: 32 },
    },
    { ...lfm2(64, [C, S, C, S], 4, 2, 192, 256, 4096), block_multiple_of: 32, sliding_window: 30, output_size: 1282 },
  ],
  // Demo: tens of millions of parameters, comfortably real-time on one core.
  small: [
    {
      ...AUDIO_MODEL,
      encoder: encoder(4, 256, 4, 128),
      lfm: lfm2(512, [C, C, A, C, C, A, C, A], 8, 2, 1536, 8192, 32768),
      depthformer: { layers: 2, dim: 256, tie: true, num_attention_heads: 8, num_key_value_heads: 2 },
    },
    { ...lfm2(256, [C, C, S, C, S, C, S, C], 8, 4, 1152, 8192, 32768), sliding_window: 30, output_size: 1282 },
  ],
  // Production shape of LFM2.5-Audio-1.5B.
  'lfm2-audio-1.5b': [
    {
      ...AUDIO_MODEL,
      semantic_codebook_factor: 100,
      codebook_weight: 'log',
      encoder: encoder(17, 512, 8, 256),
      lfm: lfm2(2048, [C, C, A, C, C, A, C, C, A, C, A, C, A, C, A, C], 32, 8, 12288, 65536, 128000),
      depthformer: { layers: 6, dim: 1024, tie: true },
    },
    { ...lfm2(512, [C, C, S, C, S, C, S, C], 16, 8, 3456, 65536, 128000), sliding_window: 30, output_size: 1282 },
  ],
});

export const BUILTIN_NAMES = Object.freeze(Object.keys(BUILTIN_CONFIGS));
