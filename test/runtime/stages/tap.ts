// A sixth, pass-through stage for the registry test: it copies every record of the ring it is
// spliced into, unchanged. Its spec and this file are all it takes to add it.
import { maxPayloadOf } from '../../../src/runtime/ring.js';
import { REC_EMBED, type StageConversation, type StageOpen } from '../../../src/runtime/protocol.js';
import { capacity, Stage, type Environment, type RoomConv } from '../../../src/runtime/stages/stage.js';
import type { StageSpec } from '../../../src/runtime/topology.js';

interface TapConv extends RoomConv {
  floats: Float32Array; // one record's payload, as floats or as ints (the same bytes)
  ints: Int32Array;
}

/** What the tap carries: embedding rows between the Conformer and the Depthformer stage. */
const CARRIES = 'embed';

class TapStage extends Stage<TapConv> {
  /** Records copied, for the test to read through stats. */
  constructor(env: Environment) {
    super('tap', env);
  }

  open(o: StageConversation & { rings?: StageOpen['rings'] }): void {
    const words = maxPayloadOf(capacity(o, CARRIES));
    const ints = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} tap` }], 1 << 24, ([a]) =>
      a!.carve('tap.record', 'metadata', Int32Array, words),
    );
    const floats = new Float32Array(ints.buffer, ints.byteOffset, ints.length);
    this.conversations[o.index] = {
      index: o.index,
      input: this.input(o, CARRIES),
      out: this.output(o, CARRIES),
      room: words,
      ints,
      floats,
    };
  }

  poll(): boolean {
    return this.pollRecords(this.conversations);
  }

  protected override record(c: TapConv, kind: number): boolean {
    const n = kind === REC_EMBED ? c.input.read(c.floats, 0) : c.input.read(c.ints, 0);
    c.out.write(kind, kind === REC_EMBED ? c.floats : c.ints, 0, n);
    return true;
  }
}

export const stage: StageSpec = {
  name: 'tap',
  reads: [CARRIES],
  writes: [CARRIES],
  compute: false,
  pin: 0,
  clocks: [],
  module: import.meta.url,
  create: (env) => new TapStage(env),
};
