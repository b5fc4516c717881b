/**
 * Random-access bytes: the one source type the format readers (WAV, safetensors) read through.
 * Files are opened at the edge (io/files); this module imports nothing, so every layer may use it.
 */
/** A file, or bytes in memory. */
export interface ByteSource {
  readonly name: string;
  readonly size: number;
  /** Reads up to `length` bytes at `position` into `into[offset…]`; returns the count. */
  read(into: Uint8Array, offset: number, length: number, position: number): number;
}

/** A ByteSource over bytes in memory. */
export function memorySource(bytes: Uint8Array, name = '(memory)'): ByteSource {
  return {
    name,
    size: bytes.length,
    read(into, offset, length, position) {
      const n = Math.max(0, Math.min(length, bytes.length - position));
      into.set(bytes.subarray(position, position + n), offset);
      return n;
    },
  };
}
