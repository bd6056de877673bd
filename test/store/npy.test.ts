import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import npyjs from "npyjs";
import { describe, expect, it } from "vitest";

import { EXIT, FileError, NpyHeaderError } from "../../src/errors.js";
import { buildNpyHeader, headerMismatch, parseNpyHeader } from "../../src/store/npy.js";
import { readNpyFile, writeNpyFile } from "../../src/store/npy-file.js";
import { f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { ATTACKS } from "./attacks.js";
import { hasNumpy, numpyRequired, python } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";

describe("npy header", () => {
  it("is the header numpy.save writes: v1.0, the dict, spaces, newline, data at a multiple of 64", () => {
    const h = buildNpyHeader("<f2", [3, 4]);
    expect(h.length % 64).toBe(0);
    expect(Array.from(h.subarray(0, 8))).toEqual([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]);
    const text = Buffer.from(h.subarray(10)).toString("latin1");
    const dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }";
    expect(h.length).toBe(128); // 10 + 60 + newline does not fit in 64
    expect(text).toBe(`${dict}${" ".repeat(h.length - 10 - dict.length - 1)}\n`);
    expect(h[8]! | (h[9]! << 8)).toBe(h.length - 10);
  });

  it("writes one-dimensional shapes with Python's trailing comma", () => {
    expect(Buffer.from(buildNpyHeader("<f4", [7])).toString("latin1")).toContain("'shape': (7,), }");
  });

  it("parses what it builds", () => {
    for (const shape of [[0, 5], [39258, 1024], [1], []]) {
      const h = buildNpyHeader("<f2", shape);
      const parsed = parseNpyHeader(h, "x.npy");
      expect(parsed).toMatchObject({ descr: "<f2", fortranOrder: false, shape, dataOffset: h.length, version: "1.0" });
      expect(parsed.dataBytes).toBe(shape.reduce((a, b) => a * b, 1) * 2);
    }
  });

  it("finds rows of width 0 wrong, whatever width a manifest expects", () => {
    const h = parseNpyHeader(buildNpyHeader("<f2", [5, 0]), "x.npy");
    for (const d of [0, -1])
      expect(headerMismatch(h, 5, d, h.dataOffset)).toEqual({
        field: "shape",
        message: "header shape is (5, 0): rows of width 0 hold no states",
      });
  });

  describe("rejects hostile headers (attacks/)", () => {
    it.each(ATTACKS.map((a) => [a.name, a] as const))("%s", (name, attack) => {
      let error: unknown;
      try {
        parseNpyHeader(attack.bytes, `attacks/${name}`);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(NpyHeaderError);
      const e = error as NpyHeaderError;
      expect(e.path).toBe(`attacks/${name}`);
      expect(e.field).toBe(attack.field);
      expect(e.exitCode).toBe(EXIT.data);
      expect(e.message).toMatch(attack.message);
      expect(e.message.startsWith(`attacks/${name}: npy header ${attack.field}:`)).toBe(true);
    });
  });
});

describe("npy files", () => {
  const dir = tempDir();

  it("are read by npyjs, an independent reader, with the same bits", async () => {
    const values = Float32Array.from({ length: 24 }, (_, i) => (i - 12) * 1.375);
    const bits = new Uint16Array(24);
    f32ToF16(values, bits);
    const path = join(dir, "2d.f2.le.npy");
    await writeNpyFile(path, [4, 6], bits);
    const bytes = readFileSync(path);
    const parsed = new npyjs({ convertFloat16: false }).parse(
      bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length),
    );
    expect(parsed.shape).toEqual([4, 6]);
    expect(parsed.fortranOrder).toBe(false);
    expect(Array.from(parsed.data as Uint16Array)).toEqual(Array.from(bits));
    const back = await readNpyFile(path);
    expect(Array.from(back.data)).toEqual(Array.from(bits));
  });

  it("say what is wrong with a file whose data is cut short", async () => {
    const path = join(dir, "2d.f2.truncated.npy");
    await writeNpyFile(path, [4, 6], new Uint16Array(24));
    writeFileSync(path, readFileSync(path).subarray(0, 128 + 40));
    await expect(readNpyFile(path)).rejects.toThrow(/needs 48 bytes of data but the file holds 40/);
  });

  it("name a missing file as missing", async () => {
    const path = join(dir, "absent.npy");
    await expect(readNpyFile(path)).rejects.toMatchObject({
      constructor: FileError,
      message: `${path}: does not exist`,
      exitCode: EXIT.data,
    });
  });
});

describe.skipIf(!hasNumpy && !numpyRequired)("npy interoperability with NumPy", () => {
  const dir = tempDir();
  mkdirSync(join(dir, "np"), { recursive: true });

  it("numpy.load reads our float16 files unchanged, with and without mmap", async () => {
    const bits = Uint16Array.from({ length: 3 * 5 }, (_, i) => (i * 2731) & 0xffff);
    const path = join(dir, "ours.f2.npy");
    await writeNpyFile(path, [3, 5], bits);
    const outText = python(
      `import numpy as np, sys
a = np.load(sys.argv[1]); m = np.load(sys.argv[1], mmap_mode="r")
assert a.dtype == np.float16 and a.shape == (3, 5) and a.flags["C_CONTIGUOUS"]
assert (a.view(np.uint16) == m.view(np.uint16)).all()
print(",".join(str(int(x)) for x in a.view(np.uint16).ravel()))`,
      path,
    );
    expect(outText.trim()).toBe(Array.from(bits).join(","));
  });

  it("writes headers byte-identical to numpy.save's", () => {
    python(
      `import numpy as np, sys
np.save(sys.argv[1] + "/h2.npy", np.zeros((39258, 1024), dtype=np.float16)[:3])
np.save(sys.argv[1] + "/h1.npy", np.zeros((7,), dtype=np.float32))`,
      dir,
    );
    const h2 = buildNpyHeader("<f2", [3, 1024]);
    const h1 = buildNpyHeader("<f4", [7]);
    expect(Buffer.from(readFileSync(join(dir, "h2.npy")).subarray(0, h2.length)).equals(Buffer.from(h2))).toBe(true);
    expect(Buffer.from(readFileSync(join(dir, "h1.npy")).subarray(0, h1.length)).equals(Buffer.from(h1))).toBe(true);
  });

  it("refuses the headers numpy.load refuses and reads those it reads, at NumPy's header limit", () => {
    // Headers of 10,000 and 10,001 bytes (padding before the newline), and shapes with and without a leading zero.
    const header = (dict: string, length: number) => {
      const text = dict + " ".repeat(length - dict.length - 1) + "\n";
      const out = new Uint8Array(10 + text.length + 8);
      out.set(buildNpyHeader("<f2", [2, 2]).subarray(0, 8));
      out[8] = text.length & 0xff;
      out[9] = text.length >> 8;
      for (let i = 0; i < text.length; i++) out[10 + i] = text.charCodeAt(i);
      return out;
    };
    const dict = (shape: string) => `{'descr': '<f2', 'fortran_order': False, 'shape': ${shape}, }`;
    const cases = {
      "at-limit": header(dict("(2, 2)"), 10000),
      "past-limit": header(dict("(2, 2)"), 10001),
      "zero-dim": header(dict("(0, 2)"), 128 - 10),
      "leading-zero": header(dict("(02, 2)"), 128 - 10),
    };
    for (const [name, bytes] of Object.entries(cases)) writeFileSync(join(dir, `${name}.npy`), bytes);
    const numpyReads = JSON.parse(
      python(
        `import numpy as np, sys, json
ok = {}
for name in sys.argv[2:]:
    try:
        np.load(sys.argv[1] + "/" + name + ".npy"); ok[name] = True
    except Exception:
        ok[name] = False
print(json.dumps(ok))`,
        dir,
        ...Object.keys(cases),
      ),
    );
    const hsmReads = Object.fromEntries(
      Object.entries(cases).map(([name, bytes]) => {
        try {
          parseNpyHeader(bytes, name);
          return [name, true];
        } catch (err) {
          if (!(err instanceof NpyHeaderError)) throw err;
          return [name, false];
        }
      }),
    );
    expect(numpyReads).toEqual({ "at-limit": true, "past-limit": false, "zero-dim": true, "leading-zero": false });
    expect(hsmReads).toEqual(numpyReads);
  });

  it("reads numpy.save's float16 and float32 files and rejects Fortran order clearly", async () => {
    python(
      `import numpy as np, sys
d = sys.argv[1]
a = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3
np.save(d + "/2d.f2.le.npy", a.astype(np.float16))
np.save(d + "/2d.f4.le.npy", a)
np.save(d + "/2d.f4.fortran.npy", np.asfortranarray(a))
np.save(d + "/1d.f4.le.npy", a.ravel())`,
      join(dir, "np"),
    );
    const f2 = await readNpyFile(join(dir, "np", "2d.f2.le.npy"));
    const f4 = await readNpyFile(join(dir, "np", "2d.f4.le.npy"));
    const one = await readNpyFile(join(dir, "np", "1d.f4.le.npy"));
    expect(f2.header.shape).toEqual([3, 4]);
    expect(f4.header.shape).toEqual([3, 4]);
    expect(one.header.shape).toEqual([12]);
    const want = Float32Array.from({ length: 12 }, (_, i) => Math.fround((Math.fround(i) - 5.5) / 3));
    expect(Array.from(f4.data)).toEqual(Array.from(want));
    const halves = new Uint16Array(12);
    f32ToF16(want, halves);
    expect(Array.from(f2.data)).toEqual(Array.from(halves));
    await expect(readNpyFile(join(dir, "np", "2d.f4.fortran.npy"))).rejects.toThrow(
      /2d\.f4\.fortran\.npy: npy header fortran_order: is True; hsm reads C-order arrays only/,
    );
  });
});
