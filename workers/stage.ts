// A pipeline stage's worker thread: which stage, and the module whose spec builds it, come in workerData.
import { workerData } from 'node:worker_threads';
import { serveStage } from '../src/runtime/host.js';

const { stage, module } = workerData as { stage: string; module: string };
await serveStage(stage, module);
