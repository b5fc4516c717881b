/**
 * How the `voxslab` command reports a failure: one line on stderr, and its exit code. Imports
 * nothing that loads the native addon, so a failure while the addon loads is reported the same way.
 */
import { exitCodeOf, reviveError } from '../errors.js';

/** parseArgs rejects unknown options, missing values and values given to boolean flags: usage errors. */
function isParseError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_');
}

/** Prints `error` as one line (with a trace only for an internal fault) and returns its exit code. */
export function reportFailure(thrown: unknown): number {
  // An error the native addon raised with a catalogue code is reported as its class.
  const error = reviveError(thrown);
  const code = isParseError(error) ? 2 : exitCodeOf(error);
  const raw = error instanceof Error ? error.message : String(error);
  const message = code === 1 ? raw : raw.replace(/\s*\n\s*/g, ' ');
  process.stderr.write(`voxslab: ${message}\n`);
  if (code === 1) process.stderr.write(`voxslab: internal fault; please report it with this trace:\n${error instanceof Error ? (error.stack ?? '') : ''}\n`);
  return code;
}
