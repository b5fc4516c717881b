/**
 * A conversation as a Node Duplex stream of little-endian PCM bytes: whole samples go to
 * `write` (a sample split across chunks waits for its other bytes), the writable side's end to
 * `end`, a read request to `read`. Ending inside a sample is an error.
 *
 * Thread contract: the main thread.
 */
import { Duplex } from 'node:stream';
import { ArgumentError } from '../errors.js';
import type { SampleFormat } from './types.js';

export interface StreamHooks {
  /** Whole samples arrived. */
  write(bytes: Uint8Array): void;
  /** Calls `done` when more may come (back-pressure). */
  drained(done: () => void): void;
  /** The writable side ended. */
  end(): void;
  /** The reader wants more. */
  read(): void;
  destroyed(): void;
}

export function sampleStream(format: SampleFormat, hooks: StreamHooks): Duplex {
  const bytesPer = format === 'f32' ? 4 : 2;
  let rest: Buffer = Buffer.alloc(0);
  return new Duplex({
    write(chunk: Buffer, _enc, done) {
      try {
        // A sample may straddle two chunks: keep the stray bytes for the next one.
        const all = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
        const whole = all.length - (all.length % bytesPer);
        rest = Buffer.from(all.subarray(whole));
        if (whole > 0) hooks.write(all.subarray(0, whole));
        hooks.drained(done);
      } catch (error) {
        done(error as Error);
      }
    },
    final(done) {
      if (rest.length > 0) {
        done(new ArgumentError(`the stream ended inside a sample (${rest.length} stray bytes of a ${bytesPer}-byte ${format} sample)`));
        return;
      }
      hooks.end();
      done();
    },
    read() {
      hooks.read();
    },
    destroy(error, done) {
      hooks.destroyed();
      done(error);
    },
  });
}
