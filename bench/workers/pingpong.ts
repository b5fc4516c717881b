// Worker for bench pipeline's wake-latency figure: answers every record on one ring with a
// record on the other (doorbells, Atomics.wait), or every message with a message (postMessage).
import { parentPort, workerData } from 'node:worker_threads';
import { Doorbells, RecordRing, type SharedRing } from '../../src/runtime/ring.js';

const d = workerData as { mode: 'ring' | 'message'; ping: SharedRing; pong: SharedRing; bells: SharedArrayBuffer; rounds: number };
if (d.mode === 'message') {
  parentPort!.on('message', (m: number) => {
    parentPort!.postMessage(m);
    if (m === d.rounds - 1) process.exit(0);
  });
} else {
  const bells = new Doorbells(new Int32Array(d.bells));
  const ping = new RecordRing(d.ping, bells);
  const pong = new RecordRing(d.pong, bells);
  const one = new Int32Array(1);
  for (let i = 0; i < d.rounds; ) {
    const seen = bells.read(1);
    if (ping.peekKind() < 0) {
      bells.wait(1, seen, 1000);
      continue;
    }
    ping.read(one, 0);
    pong.write(1, one, 0, 1);
    i++;
  }
  parentPort!.postMessage('done');
}
