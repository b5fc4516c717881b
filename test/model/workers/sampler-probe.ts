// Sampler.sample under the allocation probe, printed as JSON. The test runs this in a process
// where V8 inlines nothing, so any double that crosses a call boundary shows up as allocation.
import { AUDIO_SAMPLING, Sampler } from '../../../src/model/blocks/sampler.js';
import { allocationProbe } from '../../helpers.js';

const sampler = new Sampler(7);
const logits = Float32Array.from({ length: 2049 }, (_, i) => Math.sin(i * 0.37) * 3);
let sum = 0;
const p = allocationProbe(200, () => {
  sum = (sum + sampler.sample(logits, 2049, AUDIO_SAMPLING)) % 1_000_000;
});
console.log(JSON.stringify({ ...p, sum }));
