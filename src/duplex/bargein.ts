/**
 * The barge-in verdict: when the user starts speaking over a reply, how much of it the context
 * keeps — the frames the listener heard. The Depthformer stage judges with it from what the main
 * thread had delivered at the onset; the one-thread session from what its device played.
 *
 * Pure functions over plain numbers.
 */

/** A verdict that cuts nothing. */
export const NO_CUT = 0x7fffffff;

/**
 * The frames of reply `last` (the newest begun, -1: none) the listener heard when they spoke:
 * all its frames heard are `heardSamples` samples of reply `heardReply` (the one being delivered
 * then); a reply not reached yet was heard not at all. NO_CUT when there is nothing to cut: no
 * reply, one cut already (`cutReply`), or one delivered to its end before the onset.
 */
export function heardFrames(last: number, cutReply: number, heardReply: number, heardSamples: number, frameSamples: number): number {
  if (last < 0 || cutReply === last || heardReply > last) return NO_CUT;
  return heardReply < last ? 0 : Math.ceil(heardSamples / frameSamples);
}

/**
 * The frames a cut reply keeps of `generated`: those heard, and at least the first (a reply cut
 * before any audio would keep its text alone, which no listener heard either).
 */
export function keptFrames(generated: number, heard: number): number {
  return Math.max(1, Math.min(generated, heard));
}
