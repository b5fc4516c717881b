/**
 * Every checkpoint tensor a configuration needs, by name and shape (docs/checkpoints.md): the
 * one list the loader validates against and the synthetic checkpoint writer produces.
 */
import type { ModelConfig } from './config.js';

export type Dtype = 'F32' | 'F16' | 'BF16' | 'I8' | 'U8' | 'I32' | 'I64';

export interface TensorSpec {
  readonly name: string;
  readonly shape: readonly number[];
  /** 'float' tensors may be stored as F32, F16 or BF16; 'int' ones as I64. */
  readonly kind: 'float' | 'int';
  /** Not needed for inference: skipped when present, never required. */
  readonly ignore?: boolean;
  /** Tied: when missing, the named tensor is used in its place. */
  readonly tiedTo?: string;
  /** How to initialise a synthetic tensor: 'weight' (fan-in scaled), 'norm' (ones), 'bias', 'variance', 'index', 'window' (periodic Hann). */
  readonly init: 'weight' | 'norm' | 'bias' | 'variance' | 'index' | 'embedding' | 'window';
}

export interface CheckpointLayout {
  readonly main: readonly TensorSpec[];
  readonly detokenizer: readonly TensorSpec[];
}

const f = (name: string, shape: number[], init: TensorSpec['init'] = 'weight', extra: Partial<TensorSpec> = {}): TensorSpec =>
  Object.freeze({ name, shape: Object.freeze(shape), kind: 'float' as const, init, ...extra });

function lfm2Layers(
  prefix: string,
  d: number,
  kinds: readonly string[],
  heads: number,
  kv: number,
  ffn: number,
  kernel: number,
  convBias: boolean,
): TensorSpec[] {
  const hd = d / heads;
  const out: TensorSpec[] = [];
  kinds.forEach((kind, n) => {
    const p = `${prefix}.layers.${n}`;
    out.push(f(`${p}.operator_norm.weight`, [d], 'norm'), f(`${p}.ffn_norm.weight`, [d], 'norm'));
    if (kind === 'conv') {
      out.push(f(`${p}.conv.in_proj.weight`, [3 * d, d]), f(`${p}.conv.conv.weight`, [d, 1, kernel]), f(`${p}.conv.out_proj.weight`, [d, d]));
      if (convBias) out.push(f(`${p}.conv.in_proj.bias`, [3 * d], 'bias'), f(`${p}.conv.conv.bias`, [d], 'bias'), f(`${p}.conv.out_proj.bias`, [d], 'bias'));
    } else {
      out.push(
        f(`${p}.self_attn.q_proj.weight`, [heads * hd, d]),
        f(`${p}.self_attn.k_proj.weight`, [kv * hd, d]),
        f(`${p}.self_attn.v_proj.weight`, [kv * hd, d]),
        f(`${p}.self_attn.out_proj.weight`, [d, heads * hd]),
        f(`${p}.self_attn.q_layernorm.weight`, [hd], 'norm'),
        f(`${p}.self_attn.k_layernorm.weight`, [hd], 'norm'),
      );
    }
    out.push(f(`${p}.feed_forward.w1.weight`, [ffn, d]), f(`${p}.feed_forward.w3.weight`, [ffn, d]), f(`${p}.feed_forward.w2.weight`, [d, ffn]));
  });
  out.push(f(`${prefix}.embedding_norm.weight`, [d], 'norm'));
  return out;
}

/** The tensors of `config`, main file and detokenizer file. */
export function checkpointLayout(config: ModelConfig, options: { convBias?: boolean } = {}): CheckpointLayout {
  const e = config.encoder;
  const C = e.channels;
  const d = e.d;
  const D = config.backbone.hidden;
  const cb = config.audio.codebooks;
  const main: TensorSpec[] = [];
  // FastConformer: dw-striding subsampling.
  main.push(f('conformer.pre_encode.conv.0.weight', [C, 1, 3, 3]), f('conformer.pre_encode.conv.0.bias', [C], 'bias'));
  for (let j = 0; j < e.stages - 1; j++) {
    main.push(
      f(`conformer.pre_encode.conv.${2 + 3 * j}.weight`, [C, 1, 3, 3]),
      f(`conformer.pre_encode.conv.${2 + 3 * j}.bias`, [C], 'bias'),
      f(`conformer.pre_encode.conv.${3 + 3 * j}.weight`, [C, C, 1, 1]),
      f(`conformer.pre_encode.conv.${3 + 3 * j}.bias`, [C], 'bias'),
    );
  }
  main.push(f('conformer.pre_encode.out.weight', [d, C * e.featOut]), f('conformer.pre_encode.out.bias', [d], 'bias'));
  for (let n = 0; n < e.layers; n++) {
    const p = `conformer.layers.${n}`;
    for (const norm of ['norm_feed_forward1', 'norm_self_att', 'norm_conv', 'norm_feed_forward2', 'norm_out']) {
      main.push(f(`${p}.${norm}.weight`, [d], 'norm'), f(`${p}.${norm}.bias`, [d], 'bias'));
    }
    for (const ff of ['feed_forward1', 'feed_forward2']) {
      main.push(
        f(`${p}.${ff}.linear1.weight`, [e.ffn, d]),
        f(`${p}.${ff}.linear1.bias`, [e.ffn], 'bias'),
        f(`${p}.${ff}.linear2.weight`, [d, e.ffn]),
        f(`${p}.${ff}.linear2.bias`, [d], 'bias'),
      );
    }
    for (const l of ['linear_q', 'linear_k', 'linear_v', 'linear_out']) {
      main.push(f(`${p}.self_attn.${l}.weight`, [d, d]), f(`${p}.self_attn.${l}.bias`, [d], 'bias'));
    }
    main.push(
      f(`${p}.self_attn.linear_pos.weight`, [d, d]),
      f(`${p}.self_attn.pos_bias_u`, [e.heads, e.headDim], 'bias'),
      f(`${p}.self_attn.pos_bias_v`, [e.heads, e.headDim], 'bias'),
      f(`${p}.conv.pointwise_conv1.weight`, [2 * d, d, 1]),
      f(`${p}.conv.pointwise_conv1.bias`, [2 * d], 'bias'),
      f(`${p}.conv.depthwise_conv.weight`, [d, 1, e.convKernel]),
      f(`${p}.conv.depthwise_conv.bias`, [d], 'bias'),
      f(`${p}.conv.batch_norm.weight`, [d], 'norm'),
      f(`${p}.conv.batch_norm.bias`, [d], 'bias'),
      f(`${p}.conv.batch_norm.running_mean`, [d], 'bias'),
      f(`${p}.conv.batch_norm.running_var`, [d], 'variance'),
      Object.freeze({ name: `${p}.conv.batch_norm.num_batches_tracked`, shape: Object.freeze([]), kind: 'int' as const, init: 'index' as const, ignore: true }),
      f(`${p}.conv.pointwise_conv2.weight`, [d, d, 1]),
      f(`${p}.conv.pointwise_conv2.bias`, [d], 'bias'),
    );
  }
  // Adapter.
  main.push(
    f('audio_adapter.model.0.weight', [d], 'norm'),
    f('audio_adapter.model.0.bias', [d], 'bias'),
    f('audio_adapter.model.1.weight', [D, d]),
    f('audio_adapter.model.1.bias', [D], 'bias'),
    f('audio_adapter.model.3.weight', [D, D]),
    f('audio_adapter.model.3.bias', [D], 'bias'),
  );
  // LFM2 backbone (the text embedding is also the tied LM head).
  const b = config.backbone;
  main.push(f('lfm.embed_tokens.weight', [b.vocab, D], 'embedding'));
  main.push(...lfm2Layers('lfm', D, b.layers, b.heads, b.kvHeads, b.ffn, b.convKernel, options.convBias === true));
  // Audio embedding, Depthformer.
  const codes = config.audio.codes;
  const df = config.depthformer;
  main.push(
    f('audio_embedding.embedding.weight', [cb * codes, D], 'embedding'),
    f('audio_embedding.embedding_norm.weight', [D], 'norm', { ignore: true }),
    f('audio_embedding.to_logits.weight', [cb * codes, D], 'weight', { ignore: true }),
    f('depth_linear.weight', [cb * df.dim, D]),
    f('depth_linear.bias', [cb * df.dim], 'bias'),
  );
  for (let n = 0; n < df.layers; n++) {
    const p = `depthformer.layers.${n}`;
    main.push(
      f(`${p}.operator_norm.weight`, [df.dim], 'norm'),
      f(`${p}.ffn_norm.weight`, [df.dim], 'norm'),
      f(`${p}.operator.qkv_proj.weight`, [df.dim + 2 * df.kvHeads * df.headDim, df.dim]),
      f(`${p}.operator.bounded_attention.q_layernorm.weight`, [df.headDim], 'norm'),
      f(`${p}.operator.bounded_attention.k_layernorm.weight`, [df.headDim], 'norm'),
      f(`${p}.operator.out_proj.weight`, [df.dim, df.dim]),
      f(`${p}.feed_forward.w1.weight`, [df.ffn, df.dim]),
      f(`${p}.feed_forward.w3.weight`, [df.ffn, df.dim]),
      f(`${p}.feed_forward.w2.weight`, [df.dim, df.ffn]),
    );
  }
  for (let i = 0; i < cb; i++) {
    const p = `depth_embeddings.${i}`;
    main.push(
      f(`${p}.embedding.weight`, [codes, df.dim], 'embedding'),
      f(`${p}.embedding_norm.weight`, [df.dim], 'norm'),
      f(`${p}.to_logits.weight`, [codes, df.dim], 'embedding', { tiedTo: `${p}.embedding.weight` }),
    );
  }
  main.push(
    Object.freeze({ name: 'codebook_offsets', shape: Object.freeze([cb]), kind: 'int' as const, init: 'index' as const, ignore: true }),
    f('audio_loss_weights', [cb], 'norm', { ignore: true }),
  );

  const t = config.detokenizer;
  const detokenizer: TensorSpec[] = [
    f('emb.emb.weight', [cb * t.codes, t.hidden], 'embedding'),
    f('lfm.embed_tokens.weight', [config.backbone.vocab, t.hidden], 'embedding', { ignore: true }),
    ...lfm2Layers('lfm', t.hidden, t.layers, t.heads, t.kvHeads, t.ffn, t.convKernel, false),
    f('lin.weight', [t.outBins, t.hidden]),
    f('lin.bias', [t.outBins], 'bias'),
    f('istft.window', [t.nFft], 'window', { ignore: true }),
  ];
  return Object.freeze({ main: Object.freeze(main), detokenizer: Object.freeze(detokenizer) });
}

export const DTYPE_BYTES: Readonly<Record<Dtype, number>> = Object.freeze({ F32: 4, F16: 2, BF16: 2, I8: 1, U8: 1, I32: 4, I64: 8 });

/** Parameters in the used (not ignored) tensors of a list. */
export function parameterCount(specs: readonly TensorSpec[], includeIgnored = false): number {
  return specs.filter((s) => includeIgnored || s.ignore !== true).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
}
