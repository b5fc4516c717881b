/** The `voxslab/bench` entry: registers every benchmark with the command line's registry. */
import { registerBench } from '../src/cli/benches.js';
import * as devices from './devices.js';
import * as dsp from './dsp.js';
import * as duplex from './duplex.js';
import * as kernels from './kernels.js';
import * as memory from './memory.js';
import * as model from './model.js';
import * as pipeline from './pipeline.js';
import * as planner from './planner.js';
import * as serve from './serve.js';

registerBench('memory', 'reserve/commit/refund cycles, snapshots and carving across threads', memory);
registerBench('planner', 'planner high-water against the lower bound on random passes', planner);
registerBench('dsp', 'resampler, FFT, log-mel and ISTFT throughput', dsp);
registerBench('kernels', 'GEMV/GEMM kernels per weight encoding against the measured read bandwidth', kernels);
registerBench('model', 'backbone steps, prefill and frames per model (--production: lfm2-audio-1.5b q4/q8)', model);
registerBench('pipeline', 'the five-stage pipeline against the single-thread engine, one and two conversations', pipeline);
registerBench('duplex', 'echo cancellation, VAD, end of speech and barge-in on the loopback device, with the labelled speech set', duplex);
registerBench(
  'devices',
  'the device path on virtual ALSA devices: period jitter, callback-to-JS latency and allocations, the addon against naudiodon',
  devices,
);
registerBench('serve', 'the daemon over loopback WebSockets beside the library: round trip, first reply sample, throughput', serve);
