/**
 * The arrays of a prepared LM head ({@link PreparedHead}): how large they are,
 * and allocating them, in SharedArrayBuffers where worker threads share them.
 */
import type { PreparedHead } from "./types.js";

/** Elements of each array of a prepared head of d × vocab (bytes: times each array's BYTES_PER_ELEMENT: 2, 2, 4). */
export function headSizes(d: number, vocab: number): { hi: number; lo: number; norms: number } {
  return { hi: vocab * d, lo: vocab * d, norms: vocab };
}

/** Zeroed arrays for a prepared head of d × vocab; `shared`: backed by SharedArrayBuffers. */
export function allocateHead(d: number, vocab: number, shared = false): PreparedHead {
  const n = headSizes(d, vocab);
  const buffer = (bytes: number) => (shared ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes));
  return {
    hi: new Uint16Array(buffer(n.hi * Uint16Array.BYTES_PER_ELEMENT)),
    lo: new Uint16Array(buffer(n.lo * Uint16Array.BYTES_PER_ELEMENT)),
    norms: new Float32Array(buffer(n.norms * Float32Array.BYTES_PER_ELEMENT)),
  };
}
