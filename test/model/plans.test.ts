import t from 'tap';
import { BUILTIN_NAMES } from '../../src/model/format/config.js';
import { DEFAULT_ENCODER_TILES, encoderFrames, melRows, planEncoder, segmentSamples } from '../../src/model/plan/plans.js';
import { type PipelinePlanOptions, planPipeline } from '../../src/runtime/plan.js';
import { PassBuilder, checkNoOverlap, plan } from '../../src/memory/index.js';
import { loadConfig } from '../../src/io/config.js';

t.test('frame counts follow NeMo', async (t) => {
  const c = loadConfig('lfm2-audio-1.5b');
  t.equal(melRows(c, segmentSamples(c, 30)), 3001, '1 + L // 160');
  t.equal(encoderFrames(c, 3001), 376, 'k·80 ms gives k+1 encoder frames');
  t.equal(encoderFrames(c, melRows(c, 16000 * 0.08 * 5)), 6);
  t.equal(encoderFrames(c, 1), 1);
});

t.test('tiled attention and subsampling: no plane grows with the square of the length', async (t) => {
  const c = loadConfig('lfm2-audio-1.5b');
  const sizes = (seconds: number, tiled: boolean): Map<string, number> =>
    new Map(planEncoder(c, { segmentSeconds: seconds, tiles: tiled ? DEFAULT_ENCODER_TILES : false }).plan.buffers.map((b) => [b.name, b.bytes]));
  for (const s of [10, 20, 40, 80]) {
    const a = sizes(s, true);
    const b = sizes(2 * s, true);
    let worst = 0;
    let worstName = '';
    for (const [name, bytes] of a) {
      const g = (b.get(name) as number) / Math.max(1, bytes);
      if (g > worst) [worst, worstName] = [g, name];
    }
    t.ok(worst < 2.05, `tiled: no plane grows faster than the length (worst ${worstName} ×${worst.toFixed(3)} from ${s} s to ${2 * s} s)`);
    const ua = sizes(s, false).get('att.matrix_ac') as number;
    const ub = sizes(2 * s, false).get('att.matrix_ac') as number;
    t.ok(ub / ua > 3.9, `untiled reference: the H×T×T score plane grows ×${(ub / ua).toFixed(3)}`);
  }
  const tiled = planEncoder(c, { segmentSeconds: 60, tiles: DEFAULT_ENCODER_TILES }).plan;
  const untiled = planEncoder(c, { segmentSeconds: 60, tiles: false }).plan;
  t.ok(!tiled.buffers.some((b) => b.name.startsWith('att.matrix')), 'no score matrices when tiled');
  t.ok(untiled.buffers.some((b) => b.name === 'att.matrix_ac'));
  t.ok(tiled.highWater * 10 < untiled.highWater, `60 s Conformer high-water: tiled ${tiled.highWater} vs untiled ${untiled.highWater}`);
  t.ok(tiled.highWater < 32 * 1024 * 1024, 'the tiled production workspace is under 32 MiB');
});

t.test('stage plans are safe and at their lower bound for every configuration', async (t) => {
  for (const n of BUILTIN_NAMES) {
    const c = loadConfig(n);
    for (const sp of [planEncoder(c, { segmentSeconds: 30, tiles: DEFAULT_ENCODER_TILES }), planEncoder(c, { segmentSeconds: 7, tiles: false })]) {
      t.equal(checkNoOverlap(sp.plan.buffers, sp.plan.alignment), null, `${n} ${sp.stage}: no overlap`);
      t.ok(sp.plan.ratio <= 1.1, `${n} ${sp.stage}: ratio ${sp.plan.ratio.toFixed(3)}`);
    }
  }
});

t.test('a tile loop is one op: a plane filled tile by tile never shares bytes with the tiles', async (t) => {
  const c = loadConfig('small');
  const p = planEncoder(c, { segmentSeconds: 30, tiles: DEFAULT_ENCODER_TILES }).plan;
  const get = (n: string) => p.buffers.find((b) => b.name === n)!;
  const apart = (a: string, b: string) => {
    const x = get(a);
    const y = get(b);
    return x.offset + x.bytes <= y.offset || y.offset + y.bytes <= x.offset;
  };
  for (const [a, b] of [
    ['conv.glu', 'conv.ln'],
    ['conv.glu', 'conv.pw1'],
    ['att.ctx', 'att.scratch'],
    ['att.ctx', 'att.q'],
    ['encoded', 'adapter.h'],
    ['encoded', 'adapter.ln'],
  ] as const) {
    t.ok(apart(a, b), `${a} and ${b} are apart`);
  }
});

t.test('pass builder derives producer / last-consumer intervals', async (t) => {
  const b = new PassBuilder().external('in');
  b.state('s', 64);
  b.op('a', ['in'], [{ name: 'x', bytes: 100 }]);
  b.op('b', ['x', 's'], [{ name: 'y', bytes: 100, inPlaceOf: 'x' }]);
  b.op('c', ['x', 'y'], [{ name: 'out', bytes: 8, output: true }]);
  b.op('d', ['y']);
  const specs = b.build();
  const get = (n: string) => specs.find((s) => s.name === n)!;
  t.match(get('x'), { firstUse: 0, lastUse: 2, consumers: 2 });
  t.match(get('y'), { firstUse: 1, lastUse: 3, consumers: 2, inPlaceOf: 'x' });
  t.match(get('out'), { firstUse: 2, lastUse: 3, output: true });
  t.match(get('s'), { wholePass: true, lastUse: 3 });
  t.match(plan(specs).refusedInPlace[0]!.reason, /2 consumers/, 'x has two readers, so y cannot take it in place');
  t.throws(() => b.op('e', ['ghost']), /reads 'ghost' before any op produces it/);
  t.throws(() => b.op('f', [], [{ name: 'x', bytes: 1 }]), /'x' is produced twice/);
});

t.test('the pipeline plan validates its options and lists what conversations share', async (t) => {
  const c = loadConfig('tiny');
  const p = (o: PipelinePlanOptions) => planPipeline({ config: c, dtype: 'f32' }, o);
  t.throws(() => p({ context: 0 }), /context must be an integer from 1 to 4096/);
  t.throws(() => p({ context: 5000 }), /from 1 to 4096/);
  t.throws(() => p({ conversations: 0 }), /conversations/);
  t.throws(() => p({ segmentSeconds: -3 }), /segment/);
  t.throws(() => p({ kv: 'f8' as never }), /kv must be f32 or f16/);
  const m = p({ conversations: 3 }).manifest;
  t.same(m.owners['model/0']!.borrowers, ['conversation/0', 'conversation/1', 'conversation/2']);
  t.same(
    Object.keys(m.owners).filter((k) => k.startsWith('ticket/')),
    ['ticket/0', 'ticket/1'],
    'two pass slots by default',
  );
  t.same(
    Object.keys(m.owners).filter((k) => k.startsWith('session/')),
    ['session/0', 'session/1', 'session/2'],
    'each conversation’s rings',
  );
});
