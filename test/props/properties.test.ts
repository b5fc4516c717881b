// Property-based tests (fast-check): for arbitrary inputs the readers either succeed or refuse
// with a typed error naming the file and field, and the planner and rings keep their invariants.
import t from 'tap';
import fc from 'fast-check';
import { BadInputError, VoxslabError } from '../../src/errors.js';
import { encodeWav, memorySource, readWavInfo, readWavMono, type SampleFormat } from '../../src/dsp/wav.js';
import { readSafetensorsHeader } from '../../src/model/format/safetensors.js';
import { BUILTIN_CONFIGS, resolveConfig } from '../../src/model/format/config.js';
import { checkNoOverlap, plan } from '../../src/memory/planner.js';
import { Doorbells, RecordRing, ringBytes } from '../../src/runtime/ring.js';

const RUNS = 400;
const FORMATS: SampleFormat[] = ['pcm8', 'pcm16', 'pcm24', 'pcm32', 'float32', 'float64'];

/** Runs `fn` on bytes: success, or a typed refusal (never a crash, a RangeError or a plain Error). */
function refusesCleanly(fn: () => unknown, name: string): boolean {
  try {
    fn();
    return true;
  } catch (e) {
    if (!(e instanceof VoxslabError)) throw e;
    if (e instanceof BadInputError && !e.message.includes(name)) throw new Error(`the error does not name the file: ${e.message}`);
    return true;
  }
}

t.test('WAV: a valid file round-trips; any mutation of it is read or refused cleanly', async (t) => {
  const wav = fc.record({
    format: fc.constantFrom(...FORMATS),
    channels: fc.integer({ min: 1, max: 4 }),
    rate: fc.integer({ min: 1000, max: 192000 }),
    frames: fc.integer({ min: 0, max: 300 }),
    extensible: fc.boolean(),
  });
  fc.assert(
    fc.property(wav, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 12 }), fc.nat(), (w, edits, cut) => {
      const x = Float32Array.from({ length: w.frames * w.channels }, (_, i) => Math.sin(i * 0.37) * 0.9);
      const bytes = encodeWav({ sampleRate: w.rate, channels: w.channels, format: w.format, extensible: w.extensible }, x);
      const info = readWavInfo(memorySource(bytes, 'ok.wav'));
      if (info.frames !== w.frames || info.channels !== w.channels || info.sampleRate !== w.rate) return false;
      const bad = bytes.slice(0, bytes.length - (cut % Math.max(1, bytes.length)));
      for (const [at, v] of edits) if (bad.length > 0) bad[at % bad.length] = v;
      return refusesCleanly(() => readWavMono(memorySource(bad, 'mutated.wav')), 'mutated.wav');
    }),
    { numRuns: RUNS, seed: 1 },
  );
  t.pass(`${RUNS} WAV files and their mutations`);
});

t.test('safetensors: any header text and length is read or refused cleanly, naming the file', async (t) => {
  const header = fc.oneof(
    fc.string(),
    fc.json(),
    fc
      .dictionary(
        fc.string({ maxLength: 8 }),
        fc.record({
          dtype: fc.constantFrom('F32', 'F16', 'BF16', 'U8', 'I64', 'X9'),
          shape: fc.array(fc.integer({ min: -2, max: 40 }), { maxLength: 3 }),
          data_offsets: fc.tuple(fc.integer({ min: -4, max: 400 }), fc.integer({ min: -4, max: 400 })),
        }),
      )
      .map((d) => JSON.stringify(d)),
  );
  fc.assert(
    fc.property(header, fc.integer({ min: 0, max: 300 }), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.boolean(), (text, data, declared, honest) => {
      const h = new TextEncoder().encode(text);
      const bytes = new Uint8Array(8 + h.length + data);
      new DataView(bytes.buffer).setBigUint64(0, honest ? BigInt(h.length) : declared, true);
      bytes.set(h, 8);
      return refusesCleanly(() => readSafetensorsHeader(memorySource(bytes, 'model.safetensors')), 'model.safetensors');
    }),
    { numRuns: RUNS, seed: 2 },
  );
  t.pass(`${RUNS} safetensors headers`);
});

t.test('configuration: any edit of a built-in config is resolved or refused naming the field', async (t) => {
  const [main, det] = BUILTIN_CONFIGS.tiny!;
  const paths: string[][] = [];
  const walk = (o: unknown, p: string[]) => {
    if (o !== null && typeof o === 'object') for (const [k, v] of Object.entries(o)) walk(v, [...p, k]);
    else paths.push(p);
  };
  walk(main, []);
  const value = fc.oneof(
    fc.integer({ min: -5, max: 5 }),
    fc.constantFrom(0, 1e9, 2 ** 40, -1, 0.5, Number.NaN),
    fc.string({ maxLength: 6 }),
    fc.constant(null),
    fc.boolean(),
  );
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.constantFrom(...paths), value), { minLength: 1, maxLength: 3 }), (edits) => {
      const m = structuredClone(main) as Record<string, unknown>;
      for (const [path, v] of edits) {
        let o = m as Record<string, unknown>;
        for (const k of path.slice(0, -1)) o = o[k] as Record<string, unknown>;
        o[path[path.length - 1]!] = v;
      }
      try {
        resolveConfig('fuzz', m, det, { main: 'fuzz/config.json', detokenizer: 'fuzz/audio_detokenizer/config.json' });
        return true;
      } catch (e) {
        return e instanceof BadInputError && e.message.includes('fuzz/config.json') && /field /.test(e.message);
      }
    }),
    { numRuns: RUNS, seed: 3 },
  );
  t.pass(`${RUNS} edited configurations`);
});

t.test('planner: any interval set gets a plan no independent checker faults, with high-water at or above the bound', async (t) => {
  const spec = fc.record({
    bytes: fc.integer({ min: 1, max: 5000 }),
    first: fc.integer({ min: 0, max: 30 }),
    len: fc.integer({ min: 0, max: 12 }),
    whole: fc.boolean(),
  });
  fc.assert(
    fc.property(fc.array(spec, { minLength: 1, maxLength: 40 }), fc.constantFrom(1, 8, 64), (specs, alignment) => {
      const p = plan(
        specs.map((s, i) => ({ name: `b${i}`, bytes: s.bytes, firstUse: s.first, lastUse: s.first + s.len, wholePass: s.whole && i % 5 === 0 })),
        { alignment },
      );
      return checkNoOverlap(p.buffers, alignment) === null && p.highWater >= p.lowerBound;
    }),
    { numRuns: RUNS, seed: 4 },
  );
  t.pass(`${RUNS} interval sets`);
});

t.test('rings: any sequence of writes and reads keeps every record whole and in order', async (t) => {
  const op = fc.oneof(fc.record({ w: fc.integer({ min: 0, max: 70 }) }), fc.record({ r: fc.constant(true) }));
  fc.assert(
    fc.property(fc.integer({ min: 8, max: 160 }), fc.array(op, { maxLength: 200 }), (capacity, ops) => {
      const buffer = new SharedArrayBuffer(ringBytes(capacity));
      const ring = RecordRing.init({ buffer, byteOffset: 0, capacity }, new Doorbells(new Int32Array(new SharedArrayBuffer(8))), 0, 1);
      const queue: number[][] = [];
      let next = 1;
      const dst = new Int32Array(200);
      for (const o of ops) {
        if ('w' in o) {
          const rec = Int32Array.from({ length: o.w }, () => next++);
          const fits = ring.canWrite(o.w);
          if (ring.write(7, rec, 0, o.w) !== fits) return false;
          if (fits) queue.push([...rec]);
        } else {
          const want = queue.shift();
          if (want === undefined) {
            if (ring.availableRead() !== 0) return false;
            continue;
          }
          if (ring.peekKind() !== 7 || ring.peekLength() !== want.length) return false;
          const n = ring.read(dst, 0);
          if (n !== want.length || want.some((v, i) => dst[i] !== v)) return false;
        }
      }
      return true;
    }),
    { numRuns: RUNS, seed: 5 },
  );
  t.pass(`${RUNS} operation sequences`);
});
