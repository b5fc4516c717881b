/**
 * Slot map of the shared accounting block (one SharedCounters shared by every thread).
 * Globals first, then one fixed-size record per owner.
 */

/** Owners of memory. `model`: weights and shared formula tables; `conversation`: recurrence
 *  state; `ticket`: one in-flight pass's private scratch; `session`: device rings and metadata. */
export const OWNER_KINDS = ['model', 'conversation', 'ticket', 'session'] as const;
export type OwnerKind = (typeof OWNER_KINDS)[number];

/**
 * What charged bytes are for. `slack` is slab space no region has been carved from yet
 * (page rounding, unused tails): every slab byte is in exactly one category.
 */
export const CATEGORIES = [
  'slack',
  'weights',
  'recurrence',
  'derived',
  'workspace.frontend',
  'workspace.conformer',
  'workspace.prefill',
  'workspace.depthformer',
  'workspace.sampler',
  'workspace.detokenizer',
  'scratch',
  'capture',
  'playback.payload',
  'playback.metadata',
  'metadata',
  'ring',
  'general',
] as const;
export type Category = (typeof CATEGORIES)[number];

export const categoryIndex: Readonly<Record<Category, number>> = Object.freeze(
  Object.fromEntries(CATEGORIES.map((c, i) => [c, i])) as Record<Category, number>,
);

/** Global counter slots. */
export const kOwnerCount = 0;
export const kOwnerCapacity = 1;
export const kLimit = 2;
export const kSlabHeld = 3;
export const kPinnedHeld = 4;
export const kReserved = 5;
export const kPeak = 6;
export const kVirtualAlias = 7;
export const kAllocationsBeforeReadiness = 8;
export const kAfterReadinessAttempts = 9;
export const kAfterReadinessBytes = 10;
export const kRefusals = 11;
export const kAllocatorFailures = 12;
export const kLiveSlabs = 13;
export const kGlobalSlots = 16;

/** Per-owner slots, relative to the owner's record. */
export const kOwnerKind = 0; // index into OWNER_KINDS, plus one (0 = empty record)
export const kOwnerIndex = 1;
export const kOwnerSealed = 2;
export const kOwnerBorrowersLo = 3; // bitmask of borrower owner slots 0..31
export const kOwnerBorrowersHi = 4; // slots 32..63
export const kOwnerHeld = 5;
export const kOwnerPeak = 6;
export const kOwnerPassSlots = 7;
export const kOwnerCategories = 8; // then [category][requested, footprint, regions]
export const kCategoryFields = 3;
export const kRequested = 0;
export const kFootprint = 1;
export const kRegions = 2;
export const kOwnerSlots = kOwnerCategories + CATEGORIES.length * kCategoryFields;

/** Most owners one process can register (borrower sets are a 64-bit mask). */
export const kMaxOwners = 64;

export function ownerBase(slot: number): number {
  return kGlobalSlots + slot * kOwnerSlots;
}

export function categorySlot(ownerSlot: number, category: number, field: number): number {
  return ownerBase(ownerSlot) + kOwnerCategories + category * kCategoryFields + field;
}

export function counterCount(ownerCapacity: number): number {
  return kGlobalSlots + ownerCapacity * kOwnerSlots;
}
