/**
 * safetensors files (docs/formats.md#vllm-hidden-state-files), read with the suspicion of npy.ts: an 8-byte
 * little-endian header length, capped; a JSON header held to the format's rules (every tensor an object of
 * exactly `dtype`, `shape` and `data_offsets`, a known dtype, offsets that match the shape and lie inside the
 * file, tensors that neither overlap nor leave a gap); and nothing read beyond what the header vouches for.
 */
import type { FileHandle } from "node:fs/promises";

import { SafetensorsError } from "../errors.js";
import { fileError, utf8Text } from "../util/fs.js";
import { jsonSyntax } from "../util/jsonl.js";

/**
 * The longest header read. A file of two tensors has a header of a few hundred bytes; the cap leaves room for
 * metadata while a length field of garbage cannot make hsm allocate gigabytes.
 */
const SAFETENSORS_MAX_HEADER = 1 << 20;

/** Bytes per element of every fixed-width dtype the format defines. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
};

/** One tensor as the header describes it; `start` and `end` are byte offsets in the file, not the data buffer. */
export interface SafetensorsTensor {
  dtype: string;
  shape: number[];
  start: number;
  end: number;
}

export interface SafetensorsHeader {
  tensors: Map<string, SafetensorsTensor>;
  /** The `__metadata__` map, empty where there is none. */
  metadata: Map<string, string>;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/** Reads `length` bytes at `position`; fewer bytes than that (a file that shrank) is an error naming `path`. */
export async function readExactly(fh: FileHandle, path: string, position: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  let done = 0;
  try {
    while (done < length) {
      const { bytesRead } = await fh.read(bytes, done, length - done, position + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
  } catch (err) {
    throw fileError(err, path);
  }
  if (done < length)
    throw new SafetensorsError(path, "size", `the file ended at byte ${position + done} while reading it; it changed`);
  return bytes;
}

/**
 * The header of the safetensors file open as `fh`, `size` bytes long, checked against the file's size: every
 * tensor's bytes lie inside the file, and together they fill the data buffer exactly (as the format requires),
 * so a truncated file or one with bytes appended is refused here, before any data is read.
 */
export async function readSafetensorsHeader(fh: FileHandle, size: number, path: string): Promise<SafetensorsHeader> {
  if (size < 8) throw new SafetensorsError(path, "length", `the file is ${size} bytes, too short for one`);
  const n = Buffer.from(await readExactly(fh, path, 0, 8)).readBigUInt64LE(0);
  if (n > BigInt(SAFETENSORS_MAX_HEADER))
    throw new SafetensorsError(path, "length", `is ${n} bytes, more than the ${SAFETENSORS_MAX_HEADER} hsm reads`);
  const length = Number(n);
  if (8 + length > size)
    throw new SafetensorsError(
      path,
      "length",
      `is ${length} bytes, but the file has only ${size - 8} after it: the file is truncated or not safetensors`,
    );
  return parseSafetensorsHeader(await readExactly(fh, path, 8, length), size, path);
}

/** The header's JSON text `bytes` (after the length field), checked as {@link readSafetensorsHeader} says. */
function parseSafetensorsHeader(bytes: Uint8Array, size: number, path: string): SafetensorsHeader {
  if (bytes[0] !== 0x7b) throw new SafetensorsError(path, "text", "does not start with '{'");
  let value: unknown;
  try {
    value = JSON.parse(utf8Text(bytes, path, 8));
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    throw new SafetensorsError(path, "text", `is not valid JSON (${jsonSyntax(err)})`, { cause: err });
  }
  if (!isObject(value)) throw new SafetensorsError(path, "text", "is not a JSON object");
  const dataStart = 8 + bytes.length;
  const tensors = new Map<string, SafetensorsTensor>();
  const metadata = new Map<string, string>();
  for (const [name, entry] of Object.entries(value)) {
    if (name === "__metadata__") {
      if (!isObject(entry)) throw new SafetensorsError(path, name, "expected an object of strings");
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== "string")
          throw new SafetensorsError(path, `${name}.${k}`, `expected a string but found ${JSON.stringify(v)}`);
        metadata.set(k, v);
      }
      continue;
    }
    tensors.set(name, parseTensor(name, entry, dataStart, size, path));
  }
  checkLayout(tensors, dataStart, size, path);
  return { tensors, metadata };
}

/** One tensor entry: exactly `dtype`, `shape` and `data_offsets`, consistent with each other and the file. */
function parseTensor(name: string, entry: unknown, dataStart: number, size: number, path: string): SafetensorsTensor {
  const bad = (field: string, problem: string) => new SafetensorsError(path, `${name}${field}`, problem);
  if (!isObject(entry)) throw bad("", "expected an object with dtype, shape and data_offsets");
  const extra = Object.keys(entry).find((k) => !["dtype", "shape", "data_offsets"].includes(k));
  if (extra !== undefined) throw bad("", `has the key "${extra}"; a tensor has only dtype, shape and data_offsets`);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (typeof dtype !== "string" || DTYPE_BYTES[dtype] === undefined)
    throw bad(".dtype", `expected one of ${Object.keys(DTYPE_BYTES).join(", ")} but found ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every(isCount))
    throw bad(".shape", `expected a list of non-negative integers but found ${JSON.stringify(shape)}`);
  const [begin, end] = Array.isArray(offsets) && offsets.length === 2 ? offsets : [];
  if (!isCount(begin) || !isCount(end) || begin > end)
    throw bad(".data_offsets", `expected [begin, end] with 0 <= begin <= end but found ${JSON.stringify(offsets)}`);
  if (dataStart + end > size)
    throw bad(
      ".data_offsets",
      `ends at byte ${dataStart + end} of the file, but the file has ${size} bytes: it is truncated`,
    );
  // The element count stays exact: a product beyond the file's size is refused before it can overflow.
  let count = 1;
  for (const dim of shape as number[]) {
    count *= dim;
    if (count > size) throw bad(".shape", `${JSON.stringify(shape)} holds more values than the file has bytes`);
  }
  const bytes = count * DTYPE_BYTES[dtype]!;
  if (end - begin !== bytes)
    throw bad(
      ".data_offsets",
      `span ${end - begin} bytes, but ${dtype} ${JSON.stringify(shape)} needs ${bytes}: ` +
        "the offsets and the shape disagree",
    );
  return { dtype, shape: shape as number[], start: dataStart + begin, end: dataStart + end };
}

/** The tensors, in file order, must fill the data buffer from its first byte to the file's last, one after another. */
function checkLayout(tensors: Map<string, SafetensorsTensor>, dataStart: number, size: number, path: string): void {
  const ordered = [...tensors].sort(([, a], [, b]) => a.start - b.start || a.end - b.end);
  let at = dataStart;
  let previous = "";
  for (const [name, t] of ordered) {
    if (t.start < at)
      throw new SafetensorsError(
        path,
        `${name}.data_offsets`,
        `start at byte ${t.start - dataStart} of the data, inside ${previous}: the tensors overlap`,
      );
    if (t.start > at)
      throw new SafetensorsError(
        path,
        `${name}.data_offsets`,
        `start at byte ${t.start - dataStart} of the data, ` +
          `leaving bytes ${at - dataStart}…${t.start - dataStart - 1} unused`,
      );
    at = t.end;
    previous = name;
  }
  if (at !== size)
    throw new SafetensorsError(
      path,
      "data_offsets",
      `the tensors end at byte ${at} of the file, but it has ${size} bytes: bytes were appended or the header is wrong`,
    );
}
