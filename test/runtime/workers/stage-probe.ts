// Worker for the stage allocation probes: builds one stage on a tiny checkpoint with real
// rings (one stage per thread, as in the pipeline), drives its poll and reports the probe.
import { parentPort, workerData } from 'node:worker_threads';
import { loadCheckpoint } from '../../../src/io/checkpoint.js';
import { MemoryDomain } from '../../../src/memory/index.js';
import { resolveSpeechOptions, speechSetup } from '../../../src/core/conversation.js';
import { Doorbells, RecordRing, ringBytes, type SharedRing } from '../../../src/runtime/ring.js';
import {
  REC_CODES,
  REC_DISCARD,
  REC_EMBED,
  REC_END_SEGMENT,
  REC_MEL,
  REC_PCM,
  REC_DUPLEX,
  REC_PCM_ECHO,
  REC_SPEECH_START,
  REC_TURN_START,
  type StageInit,
  type StageName,
  DUPLEX_WORDS,
} from '../../../src/runtime/protocol.js';
import { PIPELINE } from '../../../src/runtime/stages/index.js';
import { allocationProbe, prng } from '../../helpers.js';
import { loadTokenizer } from '../../../src/io/config.js';

const { dir, stage, vad, echo } = workerData as { dir: string; stage: StageName; vad?: boolean; echo?: boolean };
const domain = MemoryDomain.create({ limit: '1GiB' });
const { config, image } = loadCheckpoint(dir, domain, false);
const options = resolveSpeechOptions(config, { replySeconds: 600 });
const setup = speechSetup(config, loadTokenizer(dir, config.backbone.vocab), options);
const control = new SharedArrayBuffer(4 * PIPELINE.layout.words);
const bells = new Doorbells(new Int32Array(control));
const init: StageInit = {
  stage,
  bell: PIPELINE.bell(stage),
  layout: PIPELINE.layout,
  domain: domain.share(),
  image: image.share(),
  config,
  options,
  maxFrames: setup.maxFrames,
  turnPositions: setup.turnPositions,
  prompts: setup.prompts,
  control: { buffer: control, byteOffset: 0 },
  slots: 2,
  pin: [],
  threads: options.threads,
  trapAllocations: false,
  exitAfterRecords: 0,
  failAllocationAt: 0,
  gateReplies: 0,
  turnEndPauseMs: 0,
  firstFramePauseMs: 0,
  replyFrameLimits: [],
};
const caps = PIPELINE.capacities(config, options.outputRate);
const rings: Record<string, RecordRing> = {};
const shared: Record<string, SharedRing> = {};
for (const { name, producer, consumer } of PIPELINE.rings) {
  const s = { buffer: new SharedArrayBuffer(ringBytes(caps[name]!)), byteOffset: 0, capacity: caps[name]! };
  rings[name] = RecordRing.init(s, bells, producer, consumer);
  shared[name] = s;
}
const ring = (name: string): RecordRing => rings[name]!;
const ends = PIPELINE.ends(stage);
const byCarried = (e: Readonly<Record<string, string>>): Record<string, SharedRing> => Object.fromEntries(Object.entries(e).map(([k, n]) => [k, shared[n]!]));
const duplex = { buffer: new SharedArrayBuffer(4 * DUPLEX_WORDS), byteOffset: 0 };
const st = PIPELINE.spec(stage).create({ domain, image, init, bells });
st.open({
  index: 0,
  seed: 1,
  inputRate: stage === 'capture' ? 22050 : 16000,
  vad: vad === true,
  echoDelayMs: echo === true ? 60 : -1,
  capacities: caps,
  rings: { reads: byCarried(ends.reads), writes: byCarried(ends.writes) },
  duplex,
});
st.ready();

// Every input is made up front: the probe must see the stage's allocations only.
const r = prng(9);
const sink = new Float32Array(1 << 16);
const ints = new Int32Array(1 << 12);
const kinds = new Int32Array(16);
const drain = (ring: RecordRing): void => {
  for (let k = ring.peekKind(); k >= 0; k = ring.peekKind()) {
    kinds[k] = kinds[k]! + 1;
    ring.read(sink, 0);
  }
};
const drainInts = (ring: RecordRing): void => {
  while (ring.peekKind() >= 0) ring.read(ints, 0);
};
let n = 0;
let body: () => void;
// The Depthformer's step is the heaviest call: a longer warm-up lets V8 finish optimising it
// even on a loaded machine.
const calls = stage === 'depthformer' ? 200 : 100;
if (stage === 'capture' || stage === 'frontend') {
  const input = stage === 'capture' ? ring('input') : ring('pcm16');
  const output = stage === 'capture' ? ring('pcm16') : ring('mel');
  const pcm = Float32Array.from({ length: 1000 }, () => r() - 0.5);
  // VAD mode: a voiced stretch, then silence, over and over (turns start, end, get dropped).
  const voiced = Float32Array.from(
    { length: 1000 },
    (_, i) =>
      0.3 * Math.sin((2 * Math.PI * 150 * i) / 16000) + 0.15 * Math.sin((2 * Math.PI * 300 * i) / 16000) + 0.1 * Math.sin((2 * Math.PI * 450 * i) / 16000),
  );
  const quiet = Float32Array.from({ length: 1000 }, () => (r() - 0.5) * 1e-4);
  // Echo mode (capture): [microphone | far end] records, the far end's echo in the microphone.
  const pair = new Float32Array(2000);
  for (let i = 0; i < 1000; i++) {
    pair[1000 + i] = voiced[i]!;
    pair[i] = 0.5 * voiced[(i + 980) % 1000]! + pcm[i]! * 0.01;
  }
  body =
    echo === true
      ? () => {
          input.write(REC_DUPLEX, pair, 0, 2000);
          st.poll();
          drain(output);
        }
      : vad === true
        ? () => {
            const k = ++n % 80;
            input.write(REC_PCM, k < 30 || (k > 50 && k < 52) ? voiced : quiet, 0, 1000);
            st.poll();
            drain(output);
          }
        : () => {
            if (++n % 300 === 0) input.write(REC_END_SEGMENT, null, 0, 0);
            else input.write(REC_PCM, pcm, 0, 1000);
            st.poll();
            drain(output);
          };
} else if (stage === 'conformer') {
  // Rows only: the encode at a segment's end is not part of this probe.
  const rows = Float32Array.from({ length: 4 * config.frontend.nMels }, () => r() * 4 - 8);
  body = () => {
    ring('mel').write(REC_MEL, rows, 0, rows.length);
    st.poll();
    if (++n % 200 === 0) {
      ring('mel').write(REC_END_SEGMENT, null, 0, 0);
      while (st.poll()) drain(ring('embed'));
    }
  };
} else if (stage === 'depthformer') {
  const D = config.backbone.hidden;
  const row = Float32Array.from({ length: 4 * D }, () => r() - 0.5);
  // A reply may end early (<|im_end|>): then the next user turn arrives, so every call steps.
  const turn = (): void => {
    ring('embed').write(REC_EMBED, row, 0, 4 * D);
    ring('embed').write(REC_END_SEGMENT, null, 0, 0);
  };
  turn();
  body = () => {
    if (!st.poll()) {
      turn();
      st.poll();
    }
    drainInts(ring('codes'));
    drainInts(ring('events'));
  };
} else {
  ring('codes').write(REC_TURN_START, null, 0, 0);
  const table = Int32Array.from({ length: 8 * 4096 }, () => Math.floor(r() * 2048));
  const codes = new Int32Array(8);
  body = () => {
    const at = 8 * (n++ % 4096);
    for (let k = 0; k < 8; k++) codes[k] = table[at + k]!;
    ring('codes').write(REC_CODES, codes, 0, 8);
    st.poll();
    drain(ring('output'));
  };
}
const result = allocationProbe(calls, body);
parentPort!.postMessage({
  stage,
  records: st.records,
  ...result,
  kinds: {
    speechStart: kinds[REC_SPEECH_START],
    endSegment: kinds[REC_END_SEGMENT],
    discard: kinds[REC_DISCARD],
    mel: kinds[REC_MEL],
    pcm: kinds[REC_PCM],
    echo: kinds[REC_PCM_ECHO],
  },
});
