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
/**
 * Headers longer than this are refused before they are parsed: NumPy's own limit (`max_header_size`), past which
 * `numpy.load` refuses a file unless told to trust it whole.
 */
const NPY_MAX_HEADER = 10000;
/** Bytes before the header text: magic, version, and the header length in 2 bytes (1.0) or 4 (2.0, 3.0). */
const NPY_PREAMBLE_1 = 10;
const NPY_PREAMBLE_2 = 12;
/** Bytes enough to parse any header this module accepts: the longer preamble and the longest header. */
export const NPY_MAX_PRELUDE = NPY_PREAMBLE_2 + NPY_MAX_HEADER;

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
    if (!Number.isSafeInteger(n) || n < 0)
      throw new RangeError(`Expected non-negative integer dimensions but received ${shape.join(",")}`);
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
  for (let i = 0; i < text.length; i++) out[NPY_PREAMBLE_1 + i] = text.charCodeAt(i);
  return out;
}

function readPrelude(bytes: Uint8Array, path: string): { version: string; headerStart: number; headerLen: number } {
  if (bytes.length < NPY_PREAMBLE_1) {
    throw new NpyHeaderError(path, "magic", `file is ${bytes.length} bytes, too short to be an npy file`);
  }
  for (let i = 0; i < NPY_MAGIC.length; i++) {
    if (bytes[i] !== NPY_MAGIC[i]) throw new NpyHeaderError(path, "magic", "is not \\x93NUMPY: not an npy file");
  }
  const major = bytes[6]!;
  const minor = bytes[7]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let prelude: { version: string; headerStart: number; headerLen: number };
  if (major === 1 && minor === 0) {
    prelude = { version: "1.0", headerStart: NPY_PREAMBLE_1, headerLen: view.getUint16(8, true) };
  } else if ((major === 2 || major === 3) && minor === 0) {
    if (bytes.length < NPY_PREAMBLE_2) throw new NpyHeaderError(path, "length", "is cut short");
    prelude = { version: `${major}.0`, headerStart: NPY_PREAMBLE_2, headerLen: view.getUint32(8, true) };
  } else {
    throw new NpyHeaderError(path, "version", `${major}.${minor} is not supported (expected 1.0, 2.0 or 3.0)`);
  }
  if (prelude.headerLen > NPY_MAX_HEADER) {
    throw new NpyHeaderError(
      path,
      "length",
      `${prelude.headerLen} bytes exceeds NumPy's ${NPY_MAX_HEADER}-byte limit (numpy.load refuses such a file by default)`,
    );
  }
  return prelude;
}

/**
 * Parses and validates an npy header. `bytes` holds at least the start of the
 * file (the first `NPY_MAX_PRELUDE` bytes always suffice); `path` names the
 * file in errors.
 */
export function parseNpyHeader(bytes: Uint8Array, path: string): NpyHeader {
  const { version, headerStart, headerLen } = readPrelude(bytes, path);
  if (bytes.length < headerStart + headerLen) {
    throw new NpyHeaderError(
      path,
      "length",
      `says ${headerLen} bytes but the file ends after ${bytes.length - headerStart}`,
    );
  }
  const raw = bytes.subarray(headerStart, headerStart + headerLen);
  let text = "";
  for (const b of raw) {
    if (b > 0x7e || (b < 0x20 && b !== 0x0a))
      throw new NpyHeaderError(path, "dict", "contains a byte that is not printable ASCII");
    text += String.fromCharCode(b);
  }
  const dict = parseDictLiteral(text, path);
  const keys = Object.keys(dict).sort();
  if (keys.join(",") !== "descr,fortran_order,shape") {
    throw new NpyHeaderError(
      path,
      "dict",
      `has keys {${keys.join(", ")}}, expected exactly descr, fortran_order, shape`,
    );
  }
  const descr = dict.descr;
  if (typeof descr !== "string") throw new NpyHeaderError(path, "descr", "is not a string");
  if (!(descr in NPY_DTYPES)) {
    throw new NpyHeaderError(
      path,
      "descr",
      `'${descr}' is not supported (expected one of ${Object.keys(NPY_DTYPES).join(", ")})`,
    );
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
  if (dataBytes > BigInt(Number.MAX_SAFE_INTEGER))
    throw new NpyHeaderError(path, "shape", `(${shape.join(", ")}) is impossibly large`);
  return {
    descr: descr as NpyDescr,
    fortranOrder,
    shape: shape as number[],
    dataOffset: headerStart + headerLen,
    dataBytes: Number(dataBytes),
    version,
  };
}

/**
 * What is wrong with a store file's header, given the rows, width and dtypes its manifest promises and the file's
 * size, and the header field it concerns (`descr`, `fortran_order`, `shape`; `size` where the file's length
 * disagrees with the shape); undefined where nothing is. `widthFrom` names the file the width was taken from,
 * where the manifest records none.
 */
export function headerMismatch(
  h: NpyHeader,
  rows: number,
  d: number,
  fileSize: number,
  dtypes: readonly string[] = ["<f2"],
  widthFrom?: string,
): { field: string; message: string } | undefined {
  if (!dtypes.includes(h.descr))
    return {
      field: "descr",
      message: `dtype is '${h.descr}', expected ${dtypes.map((t) => `'${t}'`).join(" or ")} (${dtypes.map((t) => (t === "<f2" ? "float16" : "float32")).join(" or ")})`,
    };
  if (h.fortranOrder) return { field: "fortran_order", message: "is Fortran-ordered, expected C order" };
  if (h.shape.length === 2 && h.shape[1] === 0)
    return { field: "shape", message: `header shape is (${h.shape.join(", ")}): rows of width 0 hold no states` };
  if (h.shape.length !== 2 || h.shape[0] !== rows || h.shape[1] !== d) {
    const expected =
      widthFrom === undefined
        ? `the manifest says (${rows}, ${d})`
        : `expected (${rows}, ${d}): one row per query of the row order, width ${d} as ${widthFrom} has`;
    return { field: "shape", message: `header shape is (${h.shape.join(", ")}), ${expected}` };
  }
  if (h.dataOffset + h.dataBytes !== fileSize) {
    return {
      field: "size",
      message:
        `header shape (${h.shape.join(", ")}) needs ${h.dataOffset + h.dataBytes} bytes but the file holds ${fileSize}` +
        (fileSize < h.dataOffset + h.dataBytes ? " (truncated)" : ""),
    };
  }
  return undefined;
}

/**
 * The width every layer file of one store must have, each file's header checked against it in turn: the manifest's
 * `d_model` where it records one; else, where `learn` (a store from another tool), the first two-dimensional
 * header's, named in the messages. Reading, verifying and adopting check a foreign store's headers through this, so
 * all three say the same about each file.
 */
export class LayerWidth {
  /** The file the width was taken from; undefined while it is the manifest's, or none yet. */
  private from: string | undefined;

  constructor(
    public d: number | undefined,
    private readonly learn = true,
  ) {}

  /**
   * What is wrong with file `name`'s header, as {@link headerMismatch} says, after a shape other than the one the
   * manifest records for the file (`recorded`); where the width or the row count (`rows` null) is not known, only
   * a header of other than two dimensions is wrong.
   */
  mismatch(
    h: NpyHeader,
    name: string,
    rows: number | null,
    fileSize: number,
    dtypes: readonly string[],
    recorded?: readonly number[],
  ): { field: string; message: string } | undefined {
    // Taken before anything is refused: verify goes on to the next file, which must agree with this one. A width
    // of 0 is refused (by headerMismatch) and taken from no file, so the next file's is not refused for it.
    const d = this.d ?? (this.learn && h.shape.length === 2 ? h.shape[1] : undefined);
    if (this.d === undefined && d) [this.d, this.from] = [d, name];
    const shape = recorded && recordedShapeMismatch(h, recorded);
    if (shape) return { field: "shape", message: shape };
    if (rows !== null && d !== undefined) return headerMismatch(h, rows, d, fileSize, dtypes, this.from);
    if (h.shape.length === 2) return undefined;
    return {
      field: "shape",
      message: `header shape is (${h.shape.join(", ")}), expected two dimensions (rows, d_model)`,
    };
  }
}

/**
 * Where a header's shape is not the `[rows, d_model]` a manifest records for its file, the message saying so;
 * undefined where they agree.
 */
export function recordedShapeMismatch(h: NpyHeader, recorded: readonly number[]): string | undefined {
  if (h.shape.length === recorded.length && h.shape.every((n, i) => n === recorded[i])) return undefined;
  return `header shape is (${h.shape.join(", ")}), the manifest says (${recorded.join(", ")})`;
}

/**
 * What an hsm store's file breaks of the layout its contract fixes beyond what NumPy reads (NPY format version 1.0,
 * its data on a 64-byte boundary, as {@link buildNpyHeader} writes); undefined where nothing. Other tools' files
 * are held only to what NumPy reads.
 */
export function npyLayoutProblem(h: NpyHeader): string | undefined {
  if (h.version !== "1.0") return `is NPY format version ${h.version}; an hsm store's files are version 1.0`;
  if (h.dataOffset % NPY_ALIGN !== 0) {
    return `its data starts at byte ${h.dataOffset}, not on a ${NPY_ALIGN}-byte boundary as an hsm store's files do`;
  }
  return undefined;
}

type Literal = string | boolean | number[];

/** How much of the header an error message quotes. */
const QUOTED_HEADER_CHARS = 120;
/** Digits a dimension may have: every safe integer (< 2^53 ≈ 9.007e15) has at most 16. */
const MAX_DIMENSION_DIGITS = 16;
/** NumPy's own limit on dimensions (NPY_MAXDIMS before NumPy 2); a store needs two. */
const MAX_DIMENSIONS = 32;

/** A cursor over an npy header's dict literal; each reader skips the whitespace before its token. */
class LiteralReader {
  i = 0;

  constructor(
    private readonly text: string,
    private readonly path: string,
  ) {}

  fail(what: string): never {
    const quoted = JSON.stringify(this.text.slice(0, QUOTED_HEADER_CHARS));
    throw new NpyHeaderError(this.path, "dict", `${what} at character ${this.i} of ${quoted}`);
  }

  ws(): void {
    const { text } = this;
    while (this.i < text.length && (text[this.i] === " " || text[this.i] === "\n" || text[this.i] === "\t")) this.i++;
  }

  /** Whether the next character (after whitespace) is `c`. */
  at(c: string): boolean {
    this.ws();
    return this.text[this.i] === c;
  }

  expect(c: string): void {
    this.ws();
    if (this.text[this.i] !== c) this.fail(`expected '${c}'`);
    this.i++;
  }

  str(): string {
    this.ws();
    const q = this.text[this.i];
    if (q !== "'" && q !== '"') return this.fail("expected a quoted string");
    const end = this.text.indexOf(q, this.i + 1);
    if (end < 0) this.fail("unterminated string");
    const s = this.text.slice(this.i + 1, end);
    if (s.includes("\\")) this.fail("escapes are not allowed in strings");
    this.i = end + 1;
    return s;
  }

  int(): number {
    this.ws();
    // A few characters past the longest allowed, so that a longer run of digits is seen and refused.
    const m = /^[0-9]+/.exec(this.text.slice(this.i, this.i + MAX_DIMENSION_DIGITS + 4));
    if (!m) return this.fail("expected a non-negative integer");
    this.i += m[0].length;
    if (m[0].length > MAX_DIMENSION_DIGITS) this.fail("dimension too large");
    // Python reads no integer literal with a leading zero but 0 itself, and neither does numpy.load.
    if (m[0].length > 1 && m[0].startsWith("0")) this.fail(`dimension ${m[0]} has a leading zero`);
    const n = Number(m[0]);
    if (!Number.isSafeInteger(n)) this.fail("dimension too large");
    return n;
  }

  /** A tuple of integers, its opening parenthesis already read. */
  tuple(): number[] {
    const items: number[] = [];
    if (this.at(")")) return (this.i++, items);
    for (;;) {
      items.push(this.int());
      if (items.length > MAX_DIMENSIONS) this.fail(`more than ${MAX_DIMENSIONS} dimensions`);
      if (this.at(",")) {
        this.i++;
        if (this.at(")")) return (this.i++, items);
        continue;
      }
      if (this.text[this.i] === ")") {
        // A one-element tuple needs its trailing comma in Python.
        if (items.length === 1) this.fail("a one-element tuple lacks its comma");
        return (this.i++, items);
      }
      this.fail("expected ',' or ')'");
    }
  }

  value(): Literal {
    this.ws();
    const { text, i } = this;
    const c = text[i];
    if (c === "'" || c === '"') return this.str();
    if (text.startsWith("True", i)) return ((this.i += 4), true);
    if (text.startsWith("False", i)) return ((this.i += 5), false);
    if (c === "(") return (this.i++, this.tuple());
    return this.fail("expected a string, True, False or a tuple");
  }
}

/** A Python dict literal of the three forms npy headers use: str, bool, tuple of int. */
function parseDictLiteral(text: string, path: string): Record<string, Literal> {
  const r = new LiteralReader(text, path);
  const out: Record<string, Literal> = Object.create(null);
  r.expect("{");
  if (!r.at("}")) {
    for (;;) {
      const key = r.str();
      if (key in out) r.fail(`duplicate key '${key}'`);
      r.expect(":");
      out[key] = r.value();
      if (r.at(",")) {
        r.i++;
        if (r.at("}")) break;
        continue;
      }
      if (text[r.i] === "}") break;
      r.fail("expected ',' or '}'");
    }
  }
  r.i++;
  r.ws();
  if (r.i !== text.length) r.fail("unexpected text after the dict");
  return out;
}
