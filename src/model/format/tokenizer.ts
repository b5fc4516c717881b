/**
 * Text ↔ token ids through the checkpoint's `tokenizer.json` (Hugging Face format), decoded by
 * @huggingface/tokenizers. Synthetic checkpoints get a small valid byte-level BPE tokenizer of
 * the same form as LFM2's — a regex split, GPT-2 byte-to-character mapping, BPE merges learned
 * from a short built-in text — with the special tokens at the ids docs/model.md names, and every id
 * of the vocabulary defined (unused ids are reserved special tokens).
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { ArgumentError, BadInputError } from '../../errors.js';

/** Special token ids (docs/model.md, Prompt and generation). */
export const TOKENS = Object.freeze({
  pad: 0,
  startOfText: 1,
  endOfText: 2,
  imStart: 6,
  imEnd: 7,
  audioStart: 128,
  textStart: 129,
  textEnd: 130,
});

const SPECIALS: Readonly<Record<number, string>> = Object.freeze({
  0: '<|pad|>',
  1: '<|startoftext|>',
  2: '<|endoftext|>',
  3: '<|fim_pre|>',
  4: '<|fim_mid|>',
  5: '<|fim_suf|>',
  6: '<|im_start|>',
  7: '<|im_end|>',
  128: '<|audio_start|>',
  129: '<|text_start|>',
  130: '<|text_end|>',
});

/** The split rule of LFM2-style byte-level tokenizers (contractions, words, digits, punctuation, spaces). */
const SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** Text the synthetic merges are learned from. */
const CORPUS = `Respond with interleaved text and audio.
system
user
assistant
Hello! How can I help you today? I am a local voice assistant: I listen while I speak, and I
answer with text and with speech at the same time. Tell me what you would like to know, and I
will do my best to answer it clearly and briefly. The weather today is mild, with a light wind
from the west and a chance of rain in the evening. The meeting starts at ten o'clock; it should
take about an hour. Thank you, that is all for now. Could you say that again, please?`;

/** GPT-2's reversible byte → printable character mapping. */
function byteChars(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out = new Array<string>(256);
  for (const b of keep) out[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) if (out[b] === undefined) out[b] = String.fromCodePoint(256 + n++);
  return out;
}

/** Pre-tokenized words of the corpus, as byte-level character sequences. */
function corpusWords(chars: string[]): string[][] {
  const re = new RegExp(SPLIT.replace('(?i:', '(?:'), 'gu');
  const bytes = new TextEncoder();
  return (CORPUS.match(re) ?? []).map((w) => [...bytes.encode(w)].map((b) => chars[b] as string));
}

/**
 * A valid tokenizer.json and tokenizer_config.json for a vocabulary of `vocab` ids: specials at
 * their ids; all 256 byte characters when they fit (otherwise printable ASCII, space and newline,
 * with an unknown token); then learned merges; then reserved specials up to `vocab`.
 */
export function syntheticTokenizer(vocab: number): { tokenizer: object; config: object } {
  const top = Math.max(...Object.keys(SPECIALS).map(Number));
  if (!Number.isSafeInteger(vocab) || vocab <= top + 100) throw new ArgumentError(`a synthetic tokenizer needs a vocabulary above ${top + 100}, got ${vocab}`);
  const chars = byteChars();
  const ids = new Map<string, number>();
  const added: { id: number; content: string }[] = Object.entries(SPECIALS).map(([id, content]) => ({ id: Number(id), content }));
  let next = 0;
  const take = (token: string): void => {
    while (SPECIALS[next] !== undefined) next++;
    ids.set(token, next++);
  };
  const free = vocab - Object.keys(SPECIALS).length;
  const full = free >= 256 + 64;
  let unk: string | null = null;
  if (full) {
    for (let b = 0; b < 256; b++) take(chars[b] as string);
  } else {
    unk = '<|unk|>';
    take(unk);
    for (let b = 32; b < 127; b++) take(chars[b] as string);
    take(chars[10] as string);
  }
  // BPE merges: the most frequent adjacent pair of the corpus, repeatedly (ties by first seen).
  const merges: [string, string][] = [];
  let words = corpusWords(chars).filter((w) => w.every((c) => ids.has(c)));
  const room = (): boolean => next < vocab && ids.size + Object.keys(SPECIALS).length < vocab;
  while (room()) {
    const counts = new Map<string, number>();
    let best = '';
    let bestCount = 1;
    for (const w of words) {
      for (let i = 0; i + 1 < w.length; i++) {
        const key = `${w[i]} ${w[i + 1]}`;
        const c = (counts.get(key) ?? 0) + 1;
        counts.set(key, c);
        if (c > bestCount) {
          best = key;
          bestCount = c;
        }
      }
    }
    if (best === '') break;
    const [a, b] = best.split(' ') as [string, string];
    merges.push([a, b]);
    take(a + b);
    words = words.map((w) => {
      const out: string[] = [];
      for (let i = 0; i < w.length; i++) {
        if (i + 1 < w.length && w[i] === a && w[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(w[i] as string);
      }
      return out;
    });
  }
  if (unk !== null) added.push({ id: ids.get(unk) as number, content: unk });
  const used = new Set<number>([...ids.values(), ...added.map((a) => a.id)]);
  for (let id = 0; id < vocab; id++) if (!used.has(id)) added.push({ id, content: `<|reserved_${id}|>` });
  added.sort((x, y) => x.id - y.id);
  const vocabObj: Record<string, number> = {};
  for (const [token, id] of ids) vocabObj[token] = id;
  for (const a of added) vocabObj[a.content] = a.id;
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added.map((a) => ({ id: a.id, content: a.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: SPLIT }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: unk,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: vocabObj,
      merges,
    },
  };
  const config = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: SPECIALS[TOKENS.startOfText],
    eos_token: SPECIALS[TOKENS.imEnd],
    pad_token: SPECIALS[TOKENS.pad],
    model_max_length: 1_000_000,
    clean_up_tokenization_spaces: false,
  };
  return { tokenizer, config };
}

/**
 * Every id the file names is inside the model's vocabulary, checked before the library builds
 * tables sized by the largest id (an id of 10⁹ would take it a minute and gigabytes), and the
 * vocabulary has words in it (an emptied one decodes every reply to nothing).
 */
function checkIds(file: string, tokenizer: object, vocab: number): void {
  const t = tokenizer as { model?: { vocab?: unknown }; added_tokens?: unknown };
  const words = t.model?.vocab;
  if (words !== null && typeof words === 'object' && !Array.isArray(words)) {
    let count = 0;
    for (const [word, id] of Object.entries(words as Record<string, unknown>)) {
      count++;
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocab) {
        throw new BadInputError(
          { file, field: `model.vocab['${word.slice(0, 40)}']` },
          `id ${String(id).slice(0, 40)} is not a token id of the model's vocabulary of ${vocab}`,
        );
      }
    }
    if (count === 0) throw new BadInputError({ file, field: 'model.vocab' }, 'the vocabulary is empty: every reply would decode to nothing');
  }
  if (Array.isArray(t.added_tokens)) {
    for (const [i, a] of (t.added_tokens as unknown[]).entries()) {
      const id = (a as { id?: unknown } | null)?.id;
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocab) {
        throw new BadInputError(
          { file, field: `added_tokens[${i}].id` },
          `id ${String(id).slice(0, 40)} is not a token id of the model's vocabulary of ${vocab}`,
        );
      }
    }
  }
}

/** A checkpoint's tokenizer, with the special ids checked against docs/model.md. */
export class TextTokenizer {
  readonly file: string;
  readonly #tk: Tokenizer;

  constructor(file: string, tokenizer: object, config: object, vocab: number) {
    this.file = file;
    checkIds(file, tokenizer, vocab);
    try {
      this.#tk = new Tokenizer(tokenizer, config);
    } catch (cause) {
      throw new BadInputError({ file }, `not a usable tokenizer: ${(cause as Error).message}`, { cause });
    }
    for (const id of [TOKENS.startOfText, TOKENS.imStart, TOKENS.imEnd, TOKENS.audioStart, TOKENS.textStart, TOKENS.textEnd]) {
      const content = SPECIALS[id] as string;
      const found = this.#tk.token_to_id(content);
      if (found !== id) throw new BadInputError({ file, field: content }, `the special token must have id ${id}, found ${found ?? 'none'}`);
    }
    const size = this.#tk.get_vocab(true).size;
    if (size > vocab) throw new BadInputError({ file, field: 'model.vocab' }, `${size} tokens, more than the model's vocabulary of ${vocab}`);
  }

  /** Ids of plain text (special-token text is matched as special tokens). */
  encode(text: string): number[] {
    return this.#tk.encode(text, { add_special_tokens: false }).ids;
  }

  /** Text of ids, special tokens left out. */
  decode(ids: readonly number[]): string {
    return this.#tk.decode([...ids], { skip_special_tokens: true });
  }

  /** The token string of one id (specials included), or null. */
  token(id: number): string | null {
    return this.#tk.id_to_token(id) ?? null;
  }
}
