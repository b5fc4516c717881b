// Child process: node-llama-cpp alone in a process of its own, one sample (see bench/peer.ts).
import { LlamaPeer, pagesOf } from '../peer.js';

const [gguf, threads, prefill, decode] = process.argv.slice(2);
const peer = await LlamaPeer.open(gguf!);
try {
  const speed = await peer.speed(Number(threads), Number(prefill), Number(decode));
  process.stdout.write(`${JSON.stringify({ ...speed, engine: peer.engine, variant: peer.variant, pages: pagesOf('self') })}\n`);
} finally {
  await peer.close();
}
