/**
 * The NPY container (format 1.0 written; 1.0–3.0 read): building headers the way
 * `numpy.save` does and parsing them with the suspicion due to files from other
 * machines — a capped header length, a strict literal grammar, exact keys,
 * overflow-checked sizes.
 */
import { NpyHeaderError } from "../errors.js";

export const NPY_MAGIC = Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY
/** The data of every file we write starts at a multiple of this. */
const NPY_ALIGN = 64;
/** Headers longer than this are refused before they are parsed. */
export const NPY_MAX_HEADER = 1 << 16;

/** The element types the store and its readers understand. */
const NPY_DTYPES = {
  "<f2": { bytes: 2, name: "float16" },
  "<f4": { bytes: 4, name: "float32" },
  "<f8": { bytes: 8, name: "float64" },
} as const;
export type NpyDescr = keyof typeof NPY_DTYPES;

export interface NpyHeader {
  descr: NpyDescr;
  fortranOrder: boolean;
  shape: number[];
  /** Byte offset of the first element. */
  dataOffset: number;
  /** Bytes of data the shape implies. */
  dataBytes: number;
  version: string;
}

/**
 * The header bytes `numpy.save` writes for a C-order array, padded with spaces
 * and a newline so that the data starts at a multiple of 64 bytes.
 */
export function buildNpyHeader(descr: NpyDescr, shape: readonly number[]): Uint8Array {
  for (const n of shape) {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`Expected non-negative integer dimensions but received ${shape.join(",")}`);
  }
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${tuple}, }`;
  const unpadded = NPY_MAGIC.length + 2 + 2 + dict.length + 1;
  const total = Math.ceil(unpadded / NPY_ALIGN) * NPY_ALIGN;
  const headerLen = total - NPY_MAGIC.length - 4;
  if (headerLen > 0xffff) throw new RangeError("npy header too long for format 1.0");
  const out = new Uint8Array(total);
  out.set(NPY_MAGIC, 0);
  out[6] = 1;
  out[7] = 0;
  out[8] = headerLen & 0xff;
  out[9] = headerLen >>> 8;
  const text = dict + " ".repeat(total - unpadded) + "\n";
  for (let i = 0; i < text.length; i++) out[10 + i] = text.charCodeAt(i);
  return out;
}

function readPrelude(bytes: Uint8Array, path: string): { version: string; headerStart: number; headerLen: number } {
  if (bytes.length < 10) throw new NpyHeaderError(path, "magic", `file is ${bytes.length} bytes, too short to be an npy file`);
  for (let i = 0; i < NPY_MAGIC.length; i++) {
    if (bytes[i] !== NPY_MAGIC[i]) throw new NpyHeaderError(path, "magic", "is not \\x93NUMPY: not an npy file");
  }
  const major = bytes[6]!;
  const minor = bytes[7]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (major === 1 && minor === 0) return { version: "1.0", headerStart: 10, headerLen: view.getUint16(8, true) };
  if ((major === 2 || major === 3) && minor === 0) {
    if (bytes.length < 12) throw new NpyHeaderError(path, "length", "is cut short");
    const headerLen = view.getUint32(8, true);
    if (headerLen > NPY_MAX_HEADER) {
      throw new NpyHeaderError(path, "length", `${headerLen} bytes exceeds the ${NPY_MAX_HEADER}-byte limit`);
    }
    return { version: `${major}.0`, headerStart: 12, headerLen };
  }
  throw new NpyHeaderError(path, "version", `${major}.${minor} is not supported (expected 1.0, 2.0 or 3.0)`);
}

/**
 * Parses and validates an npy header. `bytes` holds at least the start of the
 * file (the first `NPY_MAX_HEADER + 12` bytes always suffice); `path` names the
 * file in errors.
 */
export function parseNpyHeader(bytes: Uint8Array, path: string): NpyHeader {
  const { version, headerStart, headerLen } = readPrelude(bytes, path);
  if (bytes.length < headerStart + headerLen) {
    throw new NpyHeaderError(path, "length", `says ${headerLen} bytes but the file ends after ${bytes.length - headerStart}`);
  }
  const raw = bytes.subarray(headerStart, headerStart + headerLen);
  let text = "";
  for (const b of raw) {
    if (b > 0x7e || (b < 0x20 && b !== 0x0a)) throw new NpyHeaderError(path, "dict", "contains a byte that is not printable ASCII");
    text += String.fromCharCode(b);
  }
  const dict = parseDictLiteral(text, path);
  const keys = Object.keys(dict).sort();
  if (keys.join(",") !== "descr,fortran_order,shape") {
    throw new NpyHeaderError(path, "dict", `has keys {${keys.join(", ")}}, expected exactly descr, fortran_order, shape`);
  }
  const descr = dict.descr;
  if (typeof descr !== "string") throw new NpyHeaderError(path, "descr", "is not a string");
  if (!(descr in NPY_DTYPES)) {
    throw new NpyHeaderError(path, "descr", `'${descr}' is not supported (expected one of ${Object.keys(NPY_DTYPES).join(", ")})`);
  }
  const fortranOrder = dict.fortran_order;
  if (typeof fortranOrder !== "boolean") throw new NpyHeaderError(path, "fortran_order", "is not True or False");
  const shape = dict.shape;
  if (!Array.isArray(shape)) throw new NpyHeaderError(path, "shape", "is not a tuple");
  let count = 1n;
  for (const n of shape) {
    if (typeof n !== "number") throw new NpyHeaderError(path, "shape", "holds something other than integers");
    count *= BigInt(n);
  }
  const dataBytes = count * BigInt(NPY_DTYPES[descr as NpyDescr].bytes);
  if (dataBytes > BigInt(Number.MAX_SAFE_INTEGER)) throw new NpyHeaderError(path, "shape", `(${shape.join(", ")}) is impossibly large`);
  return {
    descr: descr as NpyDescr,
    fortranOrder,
    shape: shape as number[],
    dataOffset: headerStart + headerLen,
    dataBytes: Number(dataBytes),
    version,
  };
}

/** What is wrong with a store file's header, given the rows, width and dtypes its manifest promises and the file's size; undefined where nothing is. */
export function headerMismatch(h: NpyHeader, rows: number, d: number, fileSize: number, dtypes: readonly string[] = ["<f2"]): string | undefined {
  if (!dtypes.includes(h.descr)) return `dtype is '${h.descr}', expected ${dtypes.map((t) => `'${t}'`).join(" or ")} (${dtypes.map((t) => (t === "<f2" ? "float16" : "float32")).join(" or ")})`;
  if (h.fortranOrder) return "is Fortran-ordered, expected C order";
  if (h.shape.length !== 2 || h.shape[0] !== rows || h.shape[1] !== d) {
    return `header shape is (${h.shape.join(", ")}), the manifest says (${rows}, ${d})`;
  }
  if (h.dataOffset + h.dataBytes !== fileSize) {
    return `header shape (${h.shape.join(", ")}) needs ${h.dataOffset + h.dataBytes} bytes but the file holds ${fileSize}` +
      (fileSize < h.dataOffset + h.dataBytes ? " (truncated)" : "");
  }
  return undefined;
}

type Literal = string | boolean | number[];

/** A Python dict literal of the three forms npy headers use: str, bool, tuple of int. */
function parseDictLiteral(text: string, path: string): Record<string, Literal> {
  let i = 0;
  const fail = (what: string): never => {
    throw new NpyHeaderError(path, "dict", `${what} at character ${i} of ${JSON.stringify(text.slice(0, 120))}`);
  };
  const ws = () => {
    while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\t")) i++;
  };
  const expect = (c: string) => {
    ws();
    if (text[i] !== c) fail(`expected '${c}'`);
    i++;
  };
  const str = (): string => {
    ws();
    const q = text[i];
    if (q !== "'" && q !== '"') return fail("expected a quoted string");
    const end = text.indexOf(q, i + 1);
    if (end < 0) fail("unterminated string");
    const s = text.slice(i + 1, end);
    if (s.includes("\\")) fail("escapes are not allowed in strings");
    i = end + 1;
    return s;
  };
  const int = (): number => {
    ws();
    const m = /^[0-9]+/.exec(text.slice(i, i + 20));
    if (!m) return fail("expected a non-negative integer");
    i += m[0].length;
    if (m[0].length > 16) fail("dimension too large");
    const n = Number(m[0]);
    if (!Number.isSafeInteger(n)) fail("dimension too large");
    return n;
  };
  const value = (): Literal => {
    ws();
    const c = text[i];
    if (c === "'" || c === '"') return str();
    if (text.startsWith("True", i)) return (i += 4), true;
    if (text.startsWith("False", i)) return (i += 5), false;
    if (c === "(") {
      i++;
      const items: number[] = [];
      ws();
      if (text[i] === ")") return i++, items;
      for (;;) {
        items.push(int());
        if (items.length > 32) fail("more than 32 dimensions");
        ws();
        if (text[i] === ",") {
          i++;
          ws();
          if (text[i] === ")") return i++, items;
          continue;
        }
        if (text[i] === ")") {
          // A one-element tuple needs its trailing comma in Python.
          if (items.length === 1) fail("a one-element tuple lacks its comma");
          return i++, items;
        }
        fail("expected ',' or ')'");
      }
    }
    return fail("expected a string, True, False or a tuple");
  };
  const out: Record<string, Literal> = Object.create(null);
  expect("{");
  ws();
  if (text[i] !== "}") {
    for (;;) {
      const key = str();
      if (key in out) fail(`duplicate key '${key}'`);
      expect(":");
      out[key] = value();
      ws();
      if (text[i] === ",") {
        i++;
        ws();
        if (text[i] === "}") break;
        continue;
      }
      if (text[i] === "}") break;
      fail("expected ',' or '}'");
    }
  }
  i++;
  ws();
  if (i !== text.length) fail("unexpected text after the dict");
  return out;
}
