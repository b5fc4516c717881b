/**
 * A fuzz worker: runs command lines through the real CLI (`runCli`) one at a time and reports
 * each exit code with the head of what it wrote to stderr. Its stdout and stderr are captured,
 * not printed.
 */
import { parentPort } from 'node:worker_threads';
import { runCli } from '../../src/cli/app.js';

let stderr = '';
process.stdout.write = ((): boolean => true) as typeof process.stdout.write;
process.stderr.write = ((chunk: string | Uint8Array): boolean => {
  if (stderr.length < 4096) stderr += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
  return true;
}) as typeof process.stderr.write;

/** This worker's environment as it started: each case's variables are set over it and taken away after. */
const base = { ...process.env };

parentPort!.on('message', async (m: { id: number; argv: string[]; env: Record<string, string> }) => {
  stderr = '';
  for (const k of Object.keys(process.env)) if (!(k in base)) delete process.env[k];
  Object.assign(process.env, base, m.env);
  let code: number;
  let escaped: string | null = null;
  try {
    code = await runCli(m.argv);
  } catch (e) {
    code = -1;
    escaped = e instanceof Error ? (e.stack ?? e.message) : String(e);
  }
  parentPort!.postMessage({ id: m.id, code, stderr: stderr.slice(0, 2000), escaped });
});
