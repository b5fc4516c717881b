/**
 * The pipeline's shared memory, carved on the main thread: the control block, each
 * conversation's rings (the capture ring possibly a mirrored mapping), and the borrowing of the
 * model's storage by a conversation. The pipeline and its plan (plan.ts) carve through here.
 *
 * Thread contract: the main thread.
 */
import type { Arena } from '../memory/arena.js';
import type { FootprintPolicy } from '../memory/footprint.js';
import type { MemoryDomain } from '../memory/domain.js';
import { AllocationError } from '../errors.js';
import { native } from '../native.js';
import { captureMirrored, RING_HEADER_BYTES, ringBytes } from './ring.js';
import { DUPLEX_WORDS, type ControlLayout } from './protocol.js';
import { PIPELINE } from './stages/index.js';
import type { Topology } from './topology.js';

/** The control block (doorbells, attention words, stop flag): owner `model`, category `metadata`. */
export function carveControl(domain: MemoryDomain, layout: ControlLayout = PIPELINE.layout): { arena: Arena; control: Int32Array } {
  const arena = domain.createArena(domain.owner('model', 0), 'pipeline control', { bytes: domain.policy.arenaBytes([4 * layout.words]) });
  return { arena, control: arena.carve('control', 'metadata', Int32Array, layout.words) };
}

/** Bytes of one conversation's ring arena (its barge-in words too). */
export function ringArenaBytes(policy: FootprintPolicy, topology: Topology, capacities: Readonly<Record<string, number>>, mirrored: boolean): number {
  const mirror = topology.mainWrites.input;
  return policy.arenaBytes([
    ...topology.rings.map((r) => (mirrored && r.name === mirror ? RING_HEADER_BYTES : ringBytes(capacities[r.name]!))),
    4 * DUPLEX_WORDS,
  ]);
}

/** The capture ring's data words in a mirrored mapping, held under the cap by its session. */
export interface CaptureMirror {
  /** The mapping (native mirrorCreate); null in a planning domain, which maps nothing. */
  readonly address: bigint | null;
  readonly bytes: number;
  /** Refunds the hold and the virtual alias and gives the creator's reference back (once). */
  release(): void;
}

/**
 * One conversation's rings and barge-in words (protocol.ts, kVoice…), carved in one arena of
 * owner `session/<index>` (categories `ring` and `metadata`). With `mirrored`, the capture
 * (`input`) ring keeps only its header there: its data words are a mirrored mapping of
 * 4 · capacity bytes (a page multiple: ringCapacities), charged once to the session (`ring`)
 * and counted again as virtual alias bytes.
 */
export function carveRings(
  domain: MemoryDomain,
  index: number,
  capacities: Readonly<Record<string, number>>,
  mirrored = captureMirrored(),
  topology: Topology = PIPELINE,
): { arena: Arena; views: Record<string, Int32Array>; duplex: Int32Array; mirror: CaptureMirror | null } {
  const arena = domain.createArena(domain.owner('session', index), `conversation ${index} rings`, {
    bytes: ringArenaBytes(domain.policy, topology, capacities, mirrored),
  });
  const views: Record<string, Int32Array> = {};
  const mirrorRing = topology.mainWrites.input;
  let duplex: Int32Array;
  let mirror: CaptureMirror | null = null;
  try {
    for (const { name } of topology.rings) {
      const bytes = mirrored && name === mirrorRing ? RING_HEADER_BYTES : ringBytes(capacities[name]!);
      views[name] = arena.carve(`ring.${name}`, 'ring', Int32Array, bytes / 4);
    }
    duplex = arena.carve('duplex', 'metadata', Int32Array, DUPLEX_WORDS);
    if (mirrored && mirrorRing !== undefined) mirror = holdMirror(domain, index, 4 * capacities[mirrorRing]!);
  } catch (error) {
    domain.releaseSlab(arena.slab);
    throw error;
  }
  return { arena, views, duplex, mirror };
}

function holdMirror(domain: MemoryDomain, index: number, bytes: number): CaptureMirror {
  const hold = domain.holdNative(
    domain.owner('session', index),
    'ring',
    bytes,
    () => {
      const r = native.mirrorCreate(bytes);
      if (!r.ok || r.address === undefined) throw new AllocationError(`the capture ring's mirrored mapping of ${bytes} bytes failed: ${r.message}`);
      return r.address;
    },
    () => bytes,
    'the capture ring',
  );
  domain.ledger.addVirtualAlias(bytes);
  let held = true;
  return {
    address: hold.value,
    bytes,
    release: () => {
      if (!held) return;
      held = false;
      domain.ledger.addVirtualAlias(-bytes);
      hold.release();
      if (hold.value !== null) native.mirrorRelease(hold.value);
    },
  };
}

/**
 * Conversation `index` uses the storage charged once to `model` (weights image, stage tables,
 * control block): listed as its borrower while it is open.
 */
export function borrowModel(domain: MemoryDomain, index: number, open: boolean): void {
  const model = domain.owner('model', 0);
  const conv = domain.owner('conversation', index);
  if (open) domain.ledger.borrow(model, conv);
  else domain.ledger.unborrow(model, conv);
}

/**
 * Owners a pipeline registers: its model, a ticket per pass slot, and a conversation and a
 * session for each of its conversations and for one index more, which an admission's dry run
 * registers while every conversation is open (a full engine still answers what one more costs).
 */
export function ledgerOwners(slots: number, maxConversations: number): number {
  return 1 + slots + 2 * (maxConversations + 1);
}
