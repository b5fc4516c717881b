/** The `voxslab/bench` entry: registers every benchmark with the command line's registry. */
import { registerBench } from '../src/cli/benches.js';
import * as dsp from './dsp.js';
import * as kernels from './kernels.js';
import * as memory from './memory.js';
import * as model from './model.js';
import * as pipeline from './pipeline.js';
import * as planner from './planner.js';

registerBench('memory', { summary: 'reserve/commit/refund cycles, snapshots and carving across threads', run: memory.run, format: memory.format as (r: never) => string });
registerBench('planner', { summary: 'planner high-water against the lower bound on random passes', run: planner.run, format: planner.format as (r: never) => string });
registerBench('dsp', { summary: 'resampler, FFT, log-mel and ISTFT throughput', run: dsp.run, format: dsp.format as (r: never) => string });
registerBench('kernels', { summary: 'GEMV/GEMM kernels per weight encoding against the measured read bandwidth', run: kernels.run, format: kernels.format as (r: never) => string });
registerBench('model', { summary: 'backbone steps, prefill and frames per model (--production: lfm2-audio-1.5b q4/q8)', run: model.run, format: model.format as (r: never) => string });
registerBench('pipeline', { summary: 'the five-stage pipeline against the single-thread engine, one and two conversations', run: pipeline.run, format: pipeline.format as (r: never) => string });
