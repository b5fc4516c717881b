// Helpers for the daemon tests: the built CLI's `serve` in a child process, and one turn over
// a WebSocket.
import WebSocket from 'ws';
import { spawnServe, type ServeChild } from '../../src/daemon/child.js';

export type Served = ServeChild;

/** Starts `voxslab serve --model MODEL --port 0 …` and waits for its address. */
export function serve(model: string, args: string[]): Promise<Served> {
  return spawnServe(['--model', model, '--port', '0', ...args]);
}

/** SIGTERM, then the exit code. */
export async function stop(s: Served): Promise<number | null> {
  s.proc.kill('SIGTERM');
  return s.exited;
}

export interface Talk {
  pcm: Buffer;
  events: { type: string; [k: string]: unknown }[];
}

/** One turn over a WebSocket that opens its own conversation (f32 both ways). */
export function talk(url: string, speech: { rate: number; samples: Float32Array }, seed: number, headers: Record<string, string> = {}): Promise<Talk> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}/v1/ws?inputRate=${speech.rate}&format=f32&seed=${seed}`, { headers });
    const parts: Buffer[] = [];
    const events: Talk['events'] = [];
    ws.on('open', () => {
      const all = Buffer.from(speech.samples.buffer, speech.samples.byteOffset, speech.samples.byteLength);
      for (let at = 0; at < all.length; at += 4096) ws.send(all.subarray(at, at + 4096));
      ws.send(JSON.stringify({ type: 'end_turn' }));
    });
    ws.on('message', (d: Buffer, binary: boolean) => {
      if (binary) parts.push(Buffer.from(d));
      else {
        const e = JSON.parse(d.toString()) as Talk['events'][number];
        events.push(e);
        if (e.type === 'turn_end') ws.close(1000);
      }
    });
    ws.on('close', (code, reason) => {
      if (events.at(-1)?.type === 'turn_end') resolve({ pcm: Buffer.concat(parts), events });
      else reject(new Error(`socket closed before the reply ended: ${code} ${reason.toString()}`));
    });
    ws.on('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    ws.on('error', reject);
  });
}
