// Child process: the engine's own frame (bench model's frameMs) of a checkpoint with N compute
// threads, printed as JSON, so the placement bench can run it under taskset like the pipeline.
import { engineFrameMs } from '../model.js';

const [dir, threads, quick] = process.argv.slice(2);
process.stdout.write(`${JSON.stringify({ frameMs: engineFrameMs(dir!, Number(threads), quick === 'quick') })}\n`);
