import t from 'tap';
import { runScript } from '../helpers.js';

// The probe behind every "allocates nothing" test reads steady state: with the background
// compiler held back (as on a loaded machine), code that boxes doubles until it is optimised
// must not read as an allocation, and a body that allocates on every call still must.
t.test('the allocation probe waits for optimised code and still sees a real allocation', async (t) => {
  const got = runScript<{ quiet: { heap: number; windows: number }; loud: { heap: number } }>(new URL('./workers/slow-compiler.js', import.meta.url), [
    '--concurrent-recompilation-delay=300',
  ]);
  t.ok(got.quiet.heap < 1024, `a float loop, optimised late: ${got.quiet.heap} bytes over 200 calls (window ${got.quiet.windows})`);
  t.ok(got.loud.heap >= 200 * 64, `an array per call: ${got.loud.heap} bytes over 200 calls`);
});
