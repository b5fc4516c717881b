/**
 * `voxslab serve` in a child process, for supervisors, tests and benchmarks: resolves with its
 * address once it listens (it prints `listening on URL` on stdout), or rejects with what it
 * said on stderr if it exits first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { WorkerError } from '../errors.js';

const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url));

export interface ServeChild {
  proc: ChildProcess;
  /** http://host:port */
  url: string;
  /** ws://host:port */
  ws: string;
  port: number;
  /** What it has written on stderr so far. */
  stderr(): string;
  /** Its exit code (null after a signal). */
  exited: Promise<number | null>;
}

export async function spawnServe(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<ServeChild> {
  const proc = spawn(process.execPath, [CLI, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m !== null) resolve(m[1]!);
    });
    void exited.then((code) => reject(new WorkerError('voxslab serve', `exited with ${code}: ${err.trim()}`)));
  });
  return { proc, url, ws: url.replace('http:', 'ws:'), port: Number(new URL(url).port), stderr: () => err, exited };
}
