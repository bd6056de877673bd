/**
 * Whole small `.npy` files, read or written in one go (test data, probe
 * weights). Large arrays go through the store's streaming reader instead.
 */

import { NpyHeaderError } from "../errors.js";
import { readInput, writeFileAtomic } from "../util/fs.js";
import { buildNpyHeader, parseNpyHeader, type NpyHeader } from "./npy.js";

export interface NpyArray {
  header: NpyHeader;
  /** Float16 arrays come back as their bits. */
  data: Uint16Array | Float32Array | Float64Array;
}

/** Reads a C-order little-endian float16/32/64 `.npy` file. */
export async function readNpyFile(path: string): Promise<NpyArray> {
  const bytes = await readInput(path);
  const header = parseNpyHeader(bytes, path);
  if (header.fortranOrder) {
    throw new NpyHeaderError(
      path,
      "fortran_order",
      "is True; hsm reads C-order arrays only (save np.ascontiguousarray(a) instead)",
    );
  }
  const available = bytes.length - header.dataOffset;
  if (available !== header.dataBytes) {
    throw new NpyHeaderError(
      path,
      "shape",
      `(${header.shape.join(", ")}) needs ${header.dataBytes} bytes of data but the file holds ${available}`,
    );
  }
  // Copy into a fresh buffer: the data offset need not be aligned for the element size.
  const raw = bytes.buffer.slice(bytes.byteOffset + header.dataOffset, bytes.byteOffset + bytes.length);
  const data =
    header.descr === "<f2"
      ? new Uint16Array(raw)
      : header.descr === "<f4"
        ? new Float32Array(raw)
        : new Float64Array(raw);
  return { header, data };
}

/** Writes a float16 (bits) or float32 array as `.npy`, atomically. */
export async function writeNpyFile(path: string, shape: number[], data: Uint16Array | Float32Array): Promise<void> {
  const header = buildNpyHeader(data instanceof Uint16Array ? "<f2" : "<f4", shape);
  const count = shape.reduce((a, b) => a * b, 1);
  if (count !== data.length)
    throw new RangeError(`Expected ${count} values for shape (${shape.join(", ")}) but received ${data.length}`);
  await writeFileAtomic(path, [header, new Uint8Array(data.buffer, data.byteOffset, data.byteLength)]);
}
