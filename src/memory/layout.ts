import { InternalError } from '../errors.js';

/**
 * Slot map of the shared accounting block (one SharedCounters shared by every thread).
 * Globals first, then one fixed-size record per owner.
 */

/** Owners of memory. `model`: weights and shared formula tables; `conversation`: recurrence
 *  state; `ticket`: one in-flight pass's private scratch; `session`: device rings and metadata. */
export const OWNER_KINDS = ['model', 'conversation', 'ticket', 'session'] as const;
export type OwnerKind = (typeof OWNER_KINDS)[number];

/**
 * What charged bytes are for. Memory names only the categories it knows of itself; the layers
 * that own the others (model workspaces, audio rings) register theirs when their modules load.
 * `slack` is slab space no region has been carved from yet (page rounding, unused tails): every
 * slab byte is in exactly one category.
 *
 * Thread contract: each thread keeps its own registry, filled at module load. A thread that
 * joins a domain adopts the creator's order (`adoptCategories`), so a category has the same
 * counter slot in every thread; register before any domain is shared.
 */
export const CORE_CATEGORIES = ['slack', 'weights', 'recurrence', 'derived', 'scratch', 'metadata', 'ring', 'general'] as const;
export type Category = string;

/** Counter slots reserved per owner for categories (the layout does not depend on registration). */
export const kMaxCategories = 32;

let categories: string[] = [...CORE_CATEGORIES];
let categorySlots = new Map(categories.map((c, i) => [c, i]));

/** Registers categories (idempotent; order of first registration fixes their slots). */
export function registerCategories(names: readonly string[]): void {
  for (const name of names) {
    if (categorySlots.has(name)) continue;
    if (!/^[a-z][a-z0-9.]*$/.test(name)) throw new InternalError(`category '${name}' must be lowercase words joined by dots`);
    if (categories.length >= kMaxCategories) throw new InternalError(`at most ${kMaxCategories} categories; cannot register '${name}'`);
    categorySlots.set(name, categories.length);
    categories.push(name);
  }
}

/** Every registered category, in slot order. */
export function categoryNames(): readonly string[] {
  return categories;
}

/** A category's counter slot, or -1 when it is not registered. */
export function categoryIndex(name: string): number {
  return categorySlots.get(name) ?? -1;
}

/**
 * Takes the creator thread's category order. Every category this thread registered must be in
 * it (a stage that registers a category its coordinator never loaded is a bug).
 */
export function adoptCategories(names: readonly string[]): void {
  for (const mine of categories) {
    if (!names.includes(mine)) throw new InternalError(`category '${mine}' is registered in this thread but not in the domain it joins`);
  }
  categories = [...names];
  categorySlots = new Map(categories.map((c, i) => [c, i]));
}

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
/** Host-heap bytes native engines hold (echo cancellation, VAD), measured when they are made. */
export const kNativeHeld = 14;
export const kGlobalSlots = 16;

/** Per-owner slots, relative to the owner's record. */
export const kOwnerKind = 0; // index into OWNER_KINDS, plus one (0 = empty record)
export const kOwnerIndex = 1;
export const kOwnerSealed = 2;
/** Most owners one ledger can hold (a validation bound: the table is sized by its creator). */
export const kMaxOwners = 4096;
/** Owners of a ledger created without a size (a model, its pass slots and over a hundred conversations). */
export const kDefaultOwners = 256;
/** The owner whose storage this owner borrows, plus one (0 = none); an owner borrows from one owner at a time. */
export const kOwnerLender = 3;
export const kOwnerHeld = kOwnerLender + 1;
export const kOwnerPeak = kOwnerHeld + 1;
export const kOwnerPassSlots = kOwnerHeld + 2;
export const kOwnerCategories = kOwnerHeld + 3; // then [category][requested, footprint, regions]
export const kCategoryFields = 3;
export const kRequested = 0;
export const kFootprint = 1;
export const kRegions = 2;
export const kOwnerSlots = kOwnerCategories + kMaxCategories * kCategoryFields;

export function ownerBase(slot: number): number {
  return kGlobalSlots + slot * kOwnerSlots;
}

export function categorySlot(ownerSlot: number, category: number, field: number): number {
  return ownerBase(ownerSlot) + kOwnerCategories + category * kCategoryFields + field;
}

export function counterCount(ownerCapacity: number): number {
  return kGlobalSlots + ownerCapacity * kOwnerSlots;
}
