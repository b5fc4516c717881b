/**
 * Test mode's allocation trap: wraps the global ArrayBuffer, SharedArrayBuffer and typed-array
 * constructors so every `new` (and every `Type.from`/`of`) through them is counted. Views a
 * typed array makes of itself (`subarray`) use the original constructor and are not counted;
 * the heap probe in the tests covers those.
 *
 * Thread contract: one per thread; install after readiness; setup work after that runs `paused`.
 */
const TRAPPED = [
  'ArrayBuffer',
  'SharedArrayBuffer',
  'Float32Array',
  'Float64Array',
  'Int32Array',
  'Uint32Array',
  'Int16Array',
  'Uint16Array',
  'Int8Array',
  'Uint8Array',
  'Uint8ClampedArray',
  'BigInt64Array',
  'BigUint64Array',
] as const;

export interface ConstructorTrap {
  /** Constructions counted so far. */
  readonly count: number;
  /** Constructions of one global (e.g. 'SharedArrayBuffer') counted so far. */
  countOf(name: (typeof TRAPPED)[number]): number;
  /** Runs `fn` (setup work: a conversation opening or closing) without counting. */
  paused<T>(fn: () => T): T;
  uninstall(): void;
}

export function installConstructorTrap(): ConstructorTrap {
  const g = globalThis as unknown as Record<string, unknown>;
  const originals = new Map<string, unknown>();
  let count = 0;
  let pause = 0;
  const counts = new Map<string, number>();
  for (const name of TRAPPED) {
    const original = g[name] as new (...args: unknown[]) => object;
    originals.set(name, original);
    g[name] = new Proxy(original, {
      construct(target, args, newTarget) {
        if (pause === 0) {
          count++;
          counts.set(name, (counts.get(name) ?? 0) + 1);
        }
        return Reflect.construct(target, args, newTarget === g[name] ? target : newTarget) as object;
      },
    });
  }
  return {
    get count() {
      return count;
    },
    countOf(name) {
      return counts.get(name) ?? 0;
    },
    paused(fn) {
      pause++;
      try {
        return fn();
      } finally {
        pause--;
      }
    },
    uninstall() {
      for (const [name, original] of originals) g[name] = original;
      originals.clear();
    },
  };
}
