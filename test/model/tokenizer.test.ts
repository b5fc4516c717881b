import t from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BadInputError } from '../../src/errors.js';
import { syntheticTokenizer, TextTokenizer, TOKENS } from '../../src/model/format/tokenizer.js';
import { loadTokenizer } from '../../src/io/config.js';
import { scratchDir } from '../helpers.js';

const prompt = '<|startoftext|><|im_start|>system\nRespond with interleaved text and audio.<|im_end|>\n';

t.test('synthetic tokenizers: specials at their ids, text round trips, every id decodes', async (t) => {
  for (const vocab of [256, 8192]) {
    const { tokenizer, config } = syntheticTokenizer(vocab);
    const tk = new TextTokenizer('(memory)', JSON.parse(JSON.stringify(tokenizer)) as object, config, vocab);
    const ids = tk.encode(prompt);
    t.same(ids.slice(0, 2), [TOKENS.startOfText, TOKENS.imStart], `${vocab}: ChatML opens with <|startoftext|><|im_start|>`);
    t.ok(ids.includes(TOKENS.imEnd));
    t.ok(
      ids.every((i) => Number.isInteger(i) && i >= 0 && i < vocab),
      `${vocab}: ${ids.length} ids within the vocabulary`,
    );
    t.ok(ids.length < 40, `${vocab}: merges shorten the prompt to ${ids.length} ids`);
    t.equal(tk.decode(ids), 'system\nRespond with interleaved text and audio.\n', `${vocab}: decodes back without the specials`);
    for (const [id, token] of [
      [TOKENS.audioStart, '<|audio_start|>'],
      [TOKENS.textStart, '<|text_start|>'],
      [TOKENS.textEnd, '<|text_end|>'],
    ] as const)
      t.equal(tk.token(id), token);
    let all = 0;
    for (let id = 0; id < vocab; id++) all += tk.token(id) === null ? 0 : 1;
    t.equal(all, vocab, `${vocab}: every id has a token`);
    t.type(tk.decode(Array.from({ length: vocab }, (_, i) => i)), 'string');
  }
  const big = syntheticTokenizer(8192);
  const tk = new TextTokenizer('(memory)', big.tokenizer, big.config, 8192);
  t.equal(tk.decode(tk.encode('Ünïcode ✓ 123')), 'Ünïcode ✓ 123', 'byte-level: any text round trips when all 256 bytes fit');
  t.throws(() => syntheticTokenizer(200), { name: 'ArgumentError', code: 'ERR_VOXSLAB_ARGUMENT' });
});

t.test('bad tokenizer files are bad input naming the file and field', async (t) => {
  const dir = scratchDir('voxslab-tok-');
  t.throws(() => loadTokenizer(dir, 256), /tokenizer\.json: the checkpoint has no tokenizer\.json/);
  writeFileSync(join(dir, 'tokenizer.json'), '{"model": ');
  try {
    loadTokenizer(dir, 256);
    t.fail('accepted a truncated tokenizer.json');
  } catch (e) {
    t.ok(e instanceof BadInputError && /tokenizer\.json: not valid JSON/.test(e.message), (e as Error).message);
  }
  const { tokenizer, config } = syntheticTokenizer(256);
  const swapped = JSON.parse(JSON.stringify(tokenizer)) as { added_tokens: { id: number; content: string }[]; model: { vocab: Record<string, number> } };
  for (const a of swapped.added_tokens) if (a.content === '<|im_end|>') a.content = '<|im_fin|>';
  delete swapped.model.vocab['<|im_end|>'];
  swapped.model.vocab['<|im_fin|>'] = 7;
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(swapped));
  t.throws(() => loadTokenizer(dir, 256), /field <\|im_end\|>: the special token must have id 7, found none/);
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  t.throws(() => loadTokenizer(dir, 128), /field model\.vocab\['.*'\]: id 1\d\d is not a token id of the model's vocabulary of 128/);
  t.ok(loadTokenizer(dir, 256) instanceof TextTokenizer);
  // An id far outside the vocabulary is refused at once (the library would size tables by it).
  const huge = JSON.parse(JSON.stringify(tokenizer)) as { model: { vocab: Record<string, number> }; added_tokens: { id: number }[] };
  huge.model.vocab.zz = 1e9;
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(huge));
  t.throws(() => loadTokenizer(dir, 256), /field model\.vocab\['zz'\]: id 1000000000 is not a token id/);
  const added = JSON.parse(JSON.stringify(tokenizer)) as { added_tokens: { id: number }[] };
  added.added_tokens[0]!.id = -3;
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(added));
  t.throws(() => loadTokenizer(dir, 256), /field added_tokens\[0\]\.id: id -3 is not a token id/);
  // An emptied vocabulary would decode every reply to nothing.
  const empty = JSON.parse(JSON.stringify(tokenizer)) as { model: { vocab: Record<string, number>; merges: unknown[] } };
  empty.model.vocab = {};
  empty.model.merges = [];
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(empty));
  t.throws(() => loadTokenizer(dir, 256), /field model\.vocab: the vocabulary is empty/);
});
