/**
 * Run with the optimising compiler delayed (--concurrent-recompilation-delay): the allocation
 * probe on a float loop that boxes doubles until its optimised code is installed, and on one
 * that allocates a 64-byte array per call. Prints both results as JSON.
 */
import { allocationProbe } from '../../helpers.js';

const a = Float64Array.from({ length: 256 }, (_, i) => Math.sin(i));
const out = new Float64Array(1);
function mix(): void {
  let s = 0;
  for (let i = 0; i < a.length; i++) s = s * 0.5 + (a[i] as number) * 1.5;
  out[0] = s;
}
let kept: number[] = [];
function allocates(): void {
  kept = [out[0] as number, 1, 2, 3, 4, 5, 6, 7];
}
const quietBody = allocationProbe(200, mix);
const loudBody = allocationProbe(200, allocates, 1024, 2000);
process.stdout.write(JSON.stringify({ quiet: quietBody, loud: loudBody, kept: kept.length }));
