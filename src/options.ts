/**
 * Every option's default, range and doc line, once. The library (`SpeechModel`, `Pipeline`), the
 * memory planner and the command line all resolve through this table, and `voxslab <command>
 * --help` is generated from it. Library callers get `ArgumentError` naming the option; the command
 * line gets `UsageError` naming the flag and the text it was given (both exit 2).
 */
import { availableParallelism } from 'node:os';
import { ArgumentError, UsageError } from './errors.js';

/** What a default or a range may depend on: the configuration's own limits. */
export interface OptionContext {
  /** The backbone's longest context (config `max_position_embeddings`). */
  maxContext: number;
}

type Bound = number | ((c: OptionContext) => number);

interface Common {
  /** The command-line flag, without dashes. */
  flag: string;
  /** What the value is called in help text, e.g. `N`, `SECONDS`. */
  value?: string;
  doc: string;
}
export interface IntSpec extends Common {
  kind: 'int';
  min: number;
  max: Bound;
  default?: Bound;
  powerOfTwo?: boolean;
  /** Shown instead of the number when the default depends on the configuration. */
  defaultDoc?: string;
  maxDoc?: string;
}
export interface SecondsSpec extends Common {
  kind: 'seconds';
  /** Above 0 and at most `max`. */
  max: number;
  default: number;
}
export interface ChoiceSpec extends Common {
  kind: 'choice';
  choices: readonly string[];
  default?: string;
}
export interface TextSpec extends Common {
  kind: 'text';
  multiple?: boolean;
  default?: string;
}
export interface FlagSpec extends Common {
  kind: 'flag';
}
export type OptionSpec = IntSpec | SecondsSpec | ChoiceSpec | TextSpec | FlagSpec;

const HZ_MIN = 8000;
const HZ_MAX = 384000;
/** Every sample rate voxslab reads or resamples to. */
export const WAV_MIN_HZ = 1000;
export const WAV_MAX_HZ = 768000;

export const OPTIONS = {
  model: { kind: 'text', flag: 'model', value: 'DIR|tiny|small', doc: 'checkpoint folder, or a built-in name generated on first use' },
  config: { kind: 'text', flag: 'config', value: 'NAME|FILE|DIR', doc: 'a built-in configuration name, a config.json or a checkpoint folder' },
  input: { kind: 'text', flag: 'in', value: 'FILE', multiple: true, doc: 'input file' },
  output: { kind: 'text', flag: 'out', value: 'FILE', multiple: true, doc: 'output file (written under a temporary name, renamed on success)' },
  report: { kind: 'text', flag: 'report', value: 'R.json', doc: 'write the run report (manifest, stage times, tokens, codes) as JSON' },
  dump: { kind: 'text', flag: 'dump', value: 'DIR', doc: "write every stage's outputs as .npy with a JSON index (single engine)" },
  context: {
    kind: 'int',
    flag: 'context',
    value: 'T',
    min: 1,
    max: (c) => c.maxContext,
    maxDoc: "the configuration's maximum",
    default: (c) => Math.min(c.maxContext, 8192),
    defaultDoc: "the configuration's maximum, at most 8192",
    doc: 'backbone positions kept per conversation (KV cache rows)',
  },
  segmentSeconds: { kind: 'seconds', flag: 'segment', value: 'SECONDS', max: 600, default: 30, doc: 'longest user segment' },
  replySeconds: { kind: 'seconds', flag: 'reply', value: 'SECONDS', max: 3600, default: 30, doc: 'longest reply audio per turn' },
  prefillChunk: { kind: 'int', flag: 'prefill-chunk', value: 'N', min: 2, max: 4096, default: 64, doc: 'backbone positions per prefill pass' },
  kv: { kind: 'choice', flag: 'kv', choices: ['f32', 'f16'], default: 'f32', doc: 'KV cache element type (f16 halves its bytes)' },
  outputRate: { kind: 'int', flag: 'rate', value: 'HZ', min: HZ_MIN, max: HZ_MAX, default: 48000, doc: 'output (device) sample rate' },
  threads: {
    kind: 'int',
    flag: 'threads',
    value: 'N',
    min: 1,
    max: 8,
    // The computing stage takes every CPU it may use (docs/architecture.md, placement).
    default: () => Math.min(8, availableParallelism()),
    defaultDoc: 'the CPUs the process may run on, at most 8',
    doc: 'threads sharing each row-by-row linear layer of the encoder and the backbone stages; results do not depend on it',
  },
  slots: { kind: 'int', flag: 'slots', value: 'N', min: 1, max: 8, default: 2, doc: 'pass (ticket) slots per compute stage' },
  callTimeoutMs: {
    kind: 'int',
    flag: 'call-timeout',
    value: 'MS',
    min: 1,
    max: 2 ** 31 - 1,
    default: 120_000,
    doc: "how long a control call to a stage worker may take (building a large model's stages)",
  },
  conversations: { kind: 'int', flag: 'conversations', value: 'N', min: 1, max: 1024, default: 1, doc: 'simultaneous conversations' },
  seed: {
    kind: 'int',
    flag: 'seed',
    value: 'N',
    min: 0,
    max: 0xffffffff,
    default: 1,
    doc: 'sampling seed (conversation i uses seed + i); weights seed for make-checkpoint',
  },
  engine: {
    kind: 'choice',
    flag: 'engine',
    choices: ['pipeline', 'single'],
    default: 'pipeline',
    doc: 'five pinned workers, or one thread (the reference; --dump needs it)',
  },
  layout: {
    kind: 'choice',
    flag: 'layout',
    choices: ['planned', 'separate'],
    default: 'planned',
    doc: 'stage buffers as planned, or each in bytes of its own (comparison)',
  },
  pin: { kind: 'text', flag: 'pin', value: 'none|STAGE=CPU[+CPU],...', doc: 'stage placement; unnamed stages keep the default placement' },
  stageThreads: {
    kind: 'text',
    flag: 'stage-threads',
    value: 'STAGE=N,...',
    doc: 'compute threads of the named stages (1–8 each; the others take --threads)',
  },
  realtime: { kind: 'flag', flag: 'realtime', doc: 'feed input at its real rate (first-audio and underrun figures mean something)' },
  json: { kind: 'flag', flag: 'json', doc: 'print one JSON document on stdout' },
  quick: { kind: 'flag', flag: 'quick', doc: 'fewer rounds (a smoke run)' },
  benchModels: { kind: 'text', flag: 'model', value: 'DIR', multiple: true, doc: 'a checkpoint to bench besides the built-in ones' },
  peer: { kind: 'flag', flag: 'peer', doc: 'bench model: llama.cpp on the same backbones, alone in its own process, alternating in the same run' },
  peerBench: {
    kind: 'text',
    flag: 'peer-bench',
    value: 'PATH',
    doc: "bench model --peer: llama.cpp's own llama-bench binary (built from llama.cpp's source) instead of node-llama-cpp",
  },
  production: { kind: 'flag', flag: 'production', doc: 'add lfm2-audio-1.5b at q4 and q8 (generated once into the checkpoint cache)' },
  dtype: { kind: 'choice', flag: 'dtype', choices: ['f32', 'f16', 'bf16', 'q8', 'q4'], default: 'f32', doc: 'weight encoding of the written checkpoint' },
  ggufType: {
    kind: 'choice',
    flag: 'type',
    choices: ['q4_0', 'q8_0', 'f16', 'f32'],
    default: 'q4_0',
    doc: 'weight type of the GGUF file (norms and conv taps stay f32)',
  },
  bits: { kind: 'choice', flag: 'bits', choices: ['4', '8'], doc: 'quantized weight bits' },
  group: { kind: 'choice', flag: 'group', choices: ['32', '64'], default: '64', doc: 'weights per quantization group' },
  inputRate: { kind: 'int', flag: 'input-rate', value: 'HZ', min: WAV_MIN_HZ, max: WAV_MAX_HZ, doc: 'sample rate of the audio a conversation is fed' },
  resampleRate: { kind: 'int', flag: 'rate', value: 'HZ', min: WAV_MIN_HZ, max: WAV_MAX_HZ, doc: 'target sample rate' },
  raw: { kind: 'flag', flag: 'raw', doc: 'log-mel rows before per-feature normalisation' },
  intervals: {
    kind: 'text',
    flag: 'intervals',
    value: 'FILE.csv',
    doc: 'plan a CSV of buffers (header id,lower,upper,size; live from op lower up to, not including, upper)',
  },
  host: { kind: 'text', flag: 'host', value: 'ADDRESS', doc: 'address the daemon listens on (default 127.0.0.1; any other needs --token)' },
  port: { kind: 'int', flag: 'port', value: 'N', min: 0, max: 65535, default: 7860, doc: 'TCP port of the daemon (0 = any free port, printed at start)' },
  token: { kind: 'text', flag: 'token', value: 'SECRET', doc: 'bearer token every request and WebSocket must carry (or VOXSLAB_TOKEN)' },
  memoryLimit: {
    kind: 'text',
    flag: 'memory',
    value: 'SIZE',
    doc: 'the cap on every byte the process holds (512MiB, 2GiB; default VOXSLAB_MEMORY_LIMIT, else the machine)',
  },
  maxConversations: {
    kind: 'int',
    flag: 'max-conversations',
    value: 'N',
    min: 1,
    max: 1024,
    default: 64,
    doc: "conversations open at once, at most: sizes the engine's tables (admission also needs their bytes under the cap and the compute capacity)",
  },
  capacity: {
    kind: 'int',
    flag: 'capacity',
    value: 'N',
    min: 1,
    max: 1024,
    defaultDoc: 'measured when the model loads',
    doc: 'conversations the engine admits at once by compute: as many as it keeps in real time, all replying at once',
  },
  maxConnections: { kind: 'int', flag: 'max-connections', value: 'N', min: 1, max: 10000, default: 64, doc: 'TCP connections at once' },
  maxMessageBytes: { kind: 'int', flag: 'max-message', value: 'BYTES', min: 1024, max: 2 ** 26, default: 1 << 20, doc: 'largest WebSocket message' },
  stallSeconds: {
    kind: 'seconds',
    flag: 'stall-limit',
    value: 'SECONDS',
    max: 3600,
    default: 30,
    doc: 'how long a WebSocket client may send audio ahead of real time, or leave its replies unread, before its socket is closed',
  },
  maxRequestBytes: { kind: 'int', flag: 'max-request', value: 'BYTES', min: 256, max: 2 ** 24, default: 1 << 16, doc: 'largest HTTP request body' },
  silenceMs: { kind: 'int', flag: 'silence', value: 'MS', min: 100, max: 10_000, default: 600, doc: "silence after speech that ends the user's turn" },
  onsetMs: {
    kind: 'int',
    flag: 'onset',
    value: 'MS',
    min: 10,
    max: 1000,
    default: 80,
    doc: 'voiced time in a row that starts speech (and interrupts the assistant)',
  },
  speculateMs: {
    kind: 'int',
    flag: 'speculate',
    value: 'MS',
    min: 0,
    max: 10_000,
    default: 200,
    doc: 'pause after speech at which the turn so far is encoded and its reply begun ahead, kept if the silence ends the turn (0: never; else at least 100)',
  },
  minSpeechMs: {
    kind: 'int',
    flag: 'min-speech',
    value: 'MS',
    min: 10,
    max: 10_000,
    default: 200,
    doc: 'shortest speech kept as a user turn (shorter bursts are dropped)',
  },
  vad: {
    kind: 'choice',
    flag: 'vad',
    choices: ['very-low', 'low', 'moderate', 'high', 'silero'],
    default: 'low',
    doc: 'voice activity detector: the WebRTC VAD at a voice likelihood, or silero (Silero VAD v5: more accurate per frame, slower at onsets)',
  },
  lookaheadMs: { kind: 'int', flag: 'lookahead', value: 'MS', min: 80, max: 30_000, default: 1000, doc: 'how far generation may run ahead of playback' },
  inputDevice: { kind: 'text', flag: 'input-device', value: 'ID|NAME', doc: 'microphone (an id or a name from voxslab devices; default: the system default)' },
  outputDevice: { kind: 'text', flag: 'output-device', value: 'ID|NAME', doc: 'speaker (an id or a name from voxslab devices; default: the system default)' },
  loopback: {
    kind: 'text',
    flag: 'loopback',
    value: 'USER.wav',
    doc: 'no devices: the in-process loopback device plays USER.wav as the user and feeds the reply back as echo',
  },
  selfExchanges: {
    kind: 'int',
    flag: 'self',
    value: 'N',
    min: 1,
    max: 100_000,
    doc: 'no devices: two conversations talk to each other through audio alone on a pair of loopback devices until N replies, the first opened by USER.wav (--loopback)',
  },
  talkSeconds: {
    kind: 'seconds',
    flag: 'seconds',
    value: 'SECONDS',
    max: 86400,
    default: 86400,
    doc: 'stop after this much device time (default: until Ctrl-C)',
  },
  deviceRate: { kind: 'int', flag: 'rate', value: 'HZ', min: 8000, max: 384000, doc: "device sample rate (default: the output device's)" },
  align: { kind: 'int', flag: 'align', value: 'N', min: 1, max: 2 ** 30, default: 1, powerOfTwo: true, doc: 'offset alignment in bytes (a power of two)' },
} as const satisfies Record<string, OptionSpec>;

export type OptionKey = keyof typeof OPTIONS;

const NO_CONTEXT: OptionContext = { maxContext: Number.MAX_SAFE_INTEGER };

function bound(b: Bound, c: OptionContext): number {
  return typeof b === 'function' ? b(c) : b;
}

function specOf(key: OptionKey): OptionSpec {
  return OPTIONS[key] as OptionSpec;
}

/** The default of a numeric option, given the configuration's limits where it depends on them. */
export function defaultOf(key: OptionKey, c: OptionContext = NO_CONTEXT): number | string | undefined {
  const s = specOf(key);
  if (s.kind === 'int') return s.default === undefined ? undefined : bound(s.default, c);
  if (s.kind === 'flag') return undefined;
  return s.default;
}

/** What a value of this option must be, when `v` is not that; null when `v` is fine. */
function mustBe(s: OptionSpec, v: unknown, c: OptionContext): string | null {
  switch (s.kind) {
    case 'int': {
      const hi = bound(s.max, c);
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < s.min || v > hi) return `an integer from ${s.min} to ${hi}`;
      return s.powerOfTwo === true && (v & (v - 1)) !== 0 ? `a power of two from ${s.min} to ${hi}` : null;
    }
    case 'seconds':
      return typeof v === 'number' && v > 0 && v <= s.max ? null : `more than 0 and at most ${s.max} seconds`;
    case 'choice':
      return typeof v === 'string' && s.choices.includes(v) ? null : choiceList(s.choices);
    case 'text':
      return typeof v === 'string' ? null : 'a string';
    case 'flag':
      return typeof v === 'boolean' ? null : 'true or false';
  }
}

function choiceList(choices: readonly string[]): string {
  return choices.length <= 2 ? choices.join(' or ') : `${choices.slice(0, -1).join(', ')} or ${choices[choices.length - 1]}`;
}

/** A library caller's value (or the default when `undefined`), checked against the table. */
export function optionValue<T extends number | string | boolean>(key: OptionKey, given: T | undefined, c: OptionContext = NO_CONTEXT): T {
  const v = given ?? defaultOf(key, c);
  if (v === undefined) throw new ArgumentError(`${key} is required`);
  const m = mustBe(specOf(key), v, c);
  if (m !== null) throw new ArgumentError(`${key} must be ${m}, got ${typeof v === 'string' ? `'${v}'` : String(v)}`);
  return v as T;
}

/**
 * A command-line value: parsed from its text and checked, or `undefined` when the flag was not
 * given (library defaults then apply). Errors name the flag and quote the text.
 */
export function parseFlag(key: OptionKey, text: string | undefined, c: OptionContext = NO_CONTEXT): number | string | undefined {
  if (text === undefined) return undefined;
  const s = specOf(key);
  if (s.kind === 'flag') throw new UsageError(`--${s.flag} takes no value`);
  // Numbers are plain decimals: no sign, exponent or hex, which Number() would accept.
  const syntax = s.kind === 'int' ? /^\d+$/ : s.kind === 'seconds' ? /^\d+(\.\d+)?$/ : null;
  const v = syntax === null ? text : syntax.test(text) ? Number(text) : Number.NaN;
  const m = mustBe(s, v, c);
  if (m !== null) throw new UsageError(`--${s.flag} must be ${m}, got '${text}'`);
  return v;
}

/** A flag's checked value, or the table's default when it was not given. */
export function flagValue<T extends number | string>(key: OptionKey, text: string | undefined, c: OptionContext = NO_CONTEXT): T {
  return (parseFlag(key, text, c) ?? defaultOf(key, c)) as T;
}

/** `node:util` parseArgs options for a command's keys. */
export function parseArgsOptions(keys: readonly OptionKey[]): Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> {
  const out: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {};
  for (const k of keys) {
    const s = specOf(k);
    out[s.flag] = s.kind === 'flag' ? { type: 'boolean' } : s.kind === 'text' && s.multiple === true ? { type: 'string', multiple: true } : { type: 'string' };
  }
  return out;
}

/** The flag of an option key. */
export function flagOf(key: OptionKey): string {
  return specOf(key).flag;
}

/** Help lines for a command's options: flag, value, doc, default and range. */
export function optionHelp(keys: readonly OptionKey[]): string {
  const rows = keys.map((k) => {
    const s = specOf(k);
    const left = `--${s.flag}${s.kind === 'flag' ? '' : ` ${s.kind === 'choice' ? s.choices.join('|') : (s.value ?? 'VALUE')}`}`;
    const notes: string[] = [];
    if (s.kind === 'int') {
      const def = s.defaultDoc ?? (s.default === undefined ? undefined : String(bound(s.default, NO_CONTEXT)));
      if (def !== undefined) notes.push(`default ${def}`);
      notes.push(`${s.min}–${s.maxDoc ?? String(bound(s.max, NO_CONTEXT))}`);
    } else if (s.kind === 'seconds') {
      notes.push(`default ${s.default}`, `above 0, at most ${s.max}`);
    } else if ((s.kind === 'choice' || s.kind === 'text') && s.default !== undefined) {
      notes.push(`default ${s.default}`);
    }
    if (s.kind === 'text' && s.multiple === true) notes.push('repeatable');
    return { left, right: notes.length > 0 ? `${s.doc} (${notes.join('; ')})` : s.doc };
  });
  const width = Math.min(32, Math.max(...rows.map((r) => r.left.length)) + 2);
  const indent = ''.padEnd(width + 2);
  return rows
    .map((r) => {
      const lines = wrap(r.right, 96 - width);
      const head = r.left.length + 2 > width ? `  ${r.left}\n${indent}` : `  ${r.left.padEnd(width)}`;
      return head + lines.join(`\n${indent}`);
    })
    .join('\n');
}

/** Words of `text` in lines of at most `width` characters (a longer word gets a line of its own). */
export function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line.length > 0 && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line.length === 0 ? word : `${line} ${word}`;
    }
  }
  lines.push(line);
  return lines;
}
