/**
 * Reading a checkpoint's JSON files: its configurations and its tokenizer. The model layer
 * validates what is read here; it opens no file itself.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { BadInputError } from '../errors.js';
import { MAX_TEXT_BYTES, readFileBytes } from './files.js';
import { CONFIG_JSON, parseBoundedJson, TOKENIZER_JSON } from '../model/format/json.js';
import { BUILTIN_CONFIGS, BUILTIN_NAMES, resolveConfig, type ModelConfig } from '../model/format/config.js';
import { TextTokenizer } from '../model/format/tokenizer.js';

/** Largest configuration file read (a real checkpoint's is a few kilobytes). */
export const MAX_CONFIG_BYTES = 1 << 20;

/**
 * A JSON file's value, its size and shape bounded before it is parsed (json.ts); unreadable
 * files and invalid JSON are bad input naming the file.
 */
export function readJsonFile(file: string, what: 'configuration' | 'tokenizer'): unknown {
  const config = what === 'configuration';
  return parseBoundedJson(readFileBytes(file, what, config ? MAX_CONFIG_BYTES : MAX_TEXT_BYTES), config ? CONFIG_JSON : TOKENIZER_JSON, file);
}

/**
 * A built-in configuration by name, or one read from disk: a checkpoint folder (its
 * `config.json` and `audio_detokenizer/config.json`), or a `config.json` file whose
 * detokenizer config is either embedded under the key `audio_detokenizer` or in the
 * `audio_detokenizer/config.json` beside it.
 */
export function loadConfig(nameOrPath: string): ModelConfig {
  const builtin = BUILTIN_CONFIGS[nameOrPath];
  if (builtin !== undefined) return resolveConfig(nameOrPath, builtin[0], builtin[1]);
  if (!existsSync(nameOrPath)) {
    throw new BadInputError({ file: nameOrPath }, `no such file or folder, and not a built-in configuration (${BUILTIN_NAMES.join(', ')})`);
  }
  const folder = statSync(nameOrPath).isDirectory();
  const mainFile = folder ? join(nameOrPath, 'config.json') : nameOrPath;
  const main = readJsonFile(mainFile, 'configuration');
  if (main !== null && typeof main === 'object' && 'audio_detokenizer' in main) {
    return resolveConfig(nameOrPath, main, (main as Record<string, unknown>).audio_detokenizer, {
      main: mainFile,
      detokenizer: `${mainFile} (audio_detokenizer)`,
    });
  }
  const detFile = join(dirname(mainFile), 'audio_detokenizer', 'config.json');
  if (!existsSync(detFile)) {
    throw new BadInputError({ file: detFile }, 'the detokenizer configuration is missing (or embed it under "audio_detokenizer")');
  }
  return resolveConfig(nameOrPath, main, readJsonFile(detFile, 'configuration'), { main: mainFile, detokenizer: detFile });
}

/** Reads `tokenizer.json` (and `tokenizer_config.json` when present) from a checkpoint folder. */
export function loadTokenizer(dir: string, vocab: number): TextTokenizer {
  const file = join(dir, 'tokenizer.json');
  if (!existsSync(file)) throw new BadInputError({ file }, 'the checkpoint has no tokenizer.json (voxslab make-checkpoint writes one)');
  const read = (f: string): object => {
    const v = readJsonFile(f, 'tokenizer');
    if (v === null || typeof v !== 'object') throw new BadInputError({ file: f }, 'not valid JSON: not a JSON object');
    return v;
  };
  const cfgFile = join(dir, 'tokenizer_config.json');
  return new TextTokenizer(file, read(file), existsSync(cfgFile) ? read(cfgFile) : {}, vocab);
}
