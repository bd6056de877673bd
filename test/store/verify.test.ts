/**
 * `verifyStore` on a good fixture store and on one corruption at a time. Each
 * corruption must be reported with the file it concerns and its own message.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
  writeSync,
  closeSync,
  statSync,
} from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeFixture } from "../../src/synthetic/store.js";
import { EXIT, FileError } from "../../src/errors.js";
import { nativeJsonRowArrays } from "../../src/kernels/native.js";
import { manifestContentSha256, ROW_LISTS } from "../../src/store/manifest.js";
import { StoreReader } from "../../src/store/reader.js";
import { verifyStore, type VerifyReport } from "../../src/store/verify.js";
import { runChild } from "../helpers/child.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir();
const good = join(dir, "fx", "store");
let n = 0;

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 12, d: 16, layersTotal: 6, seed: 3, nonfiniteRows: 2 });
});

/** A copy of the good store with one thing done to it. */
function corrupt(change: (store: string) => void): string {
  const store = join(dir, `case-${n++}`);
  cpSync(good, store, { recursive: true });
  change(store);
  return store;
}

/** A parsed manifest: tests reach anywhere into it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests reach anywhere into the parsed JSON
type Json = Record<string, any>;

/**
 * Edits the manifest and seals the edit with a matching manifest_sha256, as a tool rewriting the whole manifest
 * would: what each case checks is then found by its own check, not only by the seal.
 */
function editManifest(store: string, edit: (m: Json) => void): void {
  const path = join(store, "index.json");
  const m = JSON.parse(readFileSync(path, "utf8"));
  edit(m);
  if (m.complete) m.manifest_sha256 = manifestContentSha256(m);
  writeFileSync(path, JSON.stringify(m));
}

/** Edits the manifest as a hand would: the seal stays as it was. */
function tamper(store: string, edit: (m: Json) => void): void {
  const path = join(store, "index.json");
  const m = JSON.parse(readFileSync(path, "utf8"));
  edit(m);
  writeFileSync(path, JSON.stringify(m, null, 1));
}

/**
 * Rewrites a layer file with the same rows under another header, `version` 1 or 2, its text padded so that the
 * data starts at a multiple of `align` bytes, and records the new file in the sealed manifest, as a tool that
 * resaved the store would: only the header's layout is then wrong.
 */
function resave(store: string, name: string, version: 1 | 2, align: number): void {
  const path = join(store, name);
  const old = readFileSync(path);
  const data = old.subarray(10 + old.readUInt16LE(8));
  const dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (72, 16), }";
  const preamble = version === 1 ? 10 : 12;
  const total = Math.ceil((preamble + dict.length + 1) / align) * align;
  const header = Buffer.alloc(preamble);
  Buffer.from("\x93NUMPY", "latin1").copy(header);
  header[6] = version;
  if (version === 1) header.writeUInt16LE(total - preamble, 8);
  else header.writeUInt32LE(total - preamble, 8);
  const text = Buffer.from(dict.padEnd(total - preamble - 1, " ") + "\n", "latin1");
  const bytes = Buffer.concat([header, text, data]);
  writeFileSync(path, bytes);
  editManifest(store, (m) => {
    m.files[name].bytes = bytes.length;
    m.files[name].sha256 = createHash("sha256").update(bytes).digest("hex");
  });
}

function lines(r: VerifyReport): string[] {
  return r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`);
}

describe("verifyStore", () => {
  it("passes a fixture store, reporting every file", async () => {
    const r = await verifyStore(good);
    expect(lines(r)).toEqual([]);
    expect(r).toMatchObject({ ok: true, complete: true, rows: 72, rows_done: 72 });
    expect(r.files.map((f) => [f.name, f.ok])).toEqual([
      ["L002.npy", true],
      ["L003.npy", true],
      ["L004.npy", true],
      ["L005.npy", true],
    ]);
    // The planted inf rows are counted in the last layer and agree on recount.
    const m = JSON.parse(readFileSync(join(good, "index.json"), "utf8"));
    expect(m.files["L005.npy"].nonfinite).toBe(2);
  });

  it("gives the same answer hashing one file at a time", async () => {
    expect((await verifyStore(good, { concurrency: 1 })).ok).toBe(true);
  });

  it.each([
    [
      "a truncated file",
      (s: string) => truncateSync(join(s, "L003.npy"), statSync(join(s, "L003.npy")).size - 100),
      [
        "L003.npy: [size] is 2332 bytes but the manifest says 2432 (truncated)",
        "L003.npy: [npy-header] header shape (72, 16) needs 2432 bytes but the file holds 2332 (truncated)",
      ],
    ],
    [
      "a flipped byte in the data",
      (s: string) => {
        const fd = openSync(join(s, "L004.npy"), "r+");
        writeSync(fd, Buffer.from([0x5a]), 0, 1, 1000);
        closeSync(fd);
      },
      [
        /^L004\.npy: \[sha256\] sha256 is [0-9a-f]{64}, the manifest says [0-9a-f]{64}: the file changed after it was written$/,
      ],
    ],
    [
      "a header whose shape does not match the file's size",
      (s: string) => {
        const path = join(s, "L002.npy");
        const b = readFileSync(path);
        b.set(Buffer.from("(71, 16)"), b.indexOf("(72, 16)"));
        writeFileSync(path, b);
      },
      [/^L002\.npy: \[npy-header\] header shape is \(71, 16\), the manifest says \(72, 16\)$/],
    ],
    [
      "a header that is not an npy header",
      (s: string) => {
        const path = join(s, "L002.npy");
        const b = readFileSync(path);
        b[0] = 0x00;
        writeFileSync(path, b);
      },
      [/^L002\.npy: \[npy-header\] npy header magic: is not \\x93NUMPY: not an npy file$/],
    ],
    [
      "a missing file",
      (s: string) => rmSync(join(s, "L005.npy")),
      ["L005.npy: [file-missing] is listed in the manifest but missing"],
    ],
    [
      "a file replaced by a symbolic link",
      (s: string) => {
        rmSync(join(s, "L005.npy"));
        symlinkSync(join(good, "L005.npy"), join(s, "L005.npy"));
      },
      ["L005.npy: [not-regular-file] is a symbolic link; a store holds its own files"],
    ],
    [
      "a stray layer file the manifest does not list",
      (s: string) => cpSync(join(s, "L002.npy"), join(s, "L001.npy")),
      ["L001.npy: [unlisted-file] is in the store folder but not in the manifest"],
    ],
    [
      "a manifest that is not JSON",
      (s: string) => writeFileSync(join(s, "index.json"), '{"format": "hidden-states/1", '),
      [/^index\.json: \[manifest-json\] is not valid JSON \(.+\)$/],
    ],
    ["a missing manifest", (s: string) => rmSync(join(s, "index.json")), ["index.json: [manifest-missing] is missing"]],
    [
      "a manifest that cannot be read",
      (s: string) => {
        rmSync(join(s, "index.json"));
        mkdirSync(join(s, "index.json"));
      },
      ["index.json: [manifest-unreadable] cannot be read: it is a directory (EISDIR)"],
    ],
    [
      "a field whose value reads like an unsafe name (the kind of problem is not guessed from its text)",
      (s: string) => editManifest(s, (m) => (m.format = "not a plain L###.npy")),
      ['index.json: [manifest-field] "format" expected "hidden-states/1" but found "not a plain L###.npy"'],
    ],
    [
      "a listed file that is a folder",
      (s: string) => {
        rmSync(join(s, "L004.npy"));
        mkdirSync(join(s, "L004.npy"));
      },
      ["L004.npy: [not-regular-file] is not a regular file"],
    ],
    [
      "a listed file that is a FIFO (never opened: opening one would wait for a writer)",
      (s: string) => {
        rmSync(join(s, "L004.npy"));
        execFileSync("mkfifo", [join(s, "L004.npy")]);
      },
      ["L004.npy: [not-regular-file] is not a regular file"],
    ],
    [
      "a manifest naming a file outside the store",
      (s: string) =>
        editManifest(s, (m) => {
          m.files["../L002.npy"] = m.files["L002.npy"];
          delete m.files["L002.npy"];
        }),
      [
        'index.json: [unsafe-name] "files" names "../L002.npy", which is not a plain L###.npy file inside the store; it was not opened',
        'index.json: [manifest-field] "files" has no entry for layer 2 (L002.npy)',
        "L002.npy: [unlisted-file] is in the store folder but not in the manifest",
      ],
    ],
    [
      "a manifest naming an absolute path",
      (s: string) =>
        editManifest(s, (m) => {
          m.files["/etc/passwd"] = m.files["L003.npy"];
        }),
      [
        'index.json: [unsafe-name] "files" names "/etc/passwd", which is not a plain L###.npy file inside the store; it was not opened',
      ],
    ],
    [
      "query_ids with a row missing",
      (s: string) => editManifest(s, (m) => m.query_ids.pop()),
      [
        'index.json: [manifest-field] "fact_ids" has 72 entries but query_ids has 71: one per row is required',
        'index.json: [manifest-field] "condition_families" has 72 entries but query_ids has 71: one per row is required',
        'index.json: [manifest-field] "rows_done" is 72 but the store has only 71 rows',
        'index.json: [manifest-field] "complete" is true but rows_done is 72 of 71',
        'index.json: [manifest-field] "files.L002.npy.shape" has 72 rows but query_ids has 71',
        'index.json: [manifest-field] "files.L003.npy.shape" has 72 rows but query_ids has 71',
        'index.json: [manifest-field] "files.L004.npy.shape" has 72 rows but query_ids has 71',
        'index.json: [manifest-field] "files.L005.npy.shape" has 72 rows but query_ids has 71',
        "L002.npy: [npy-header] header shape is (72, 16), the manifest says (71, 16)",
        "L003.npy: [npy-header] header shape is (72, 16), the manifest says (71, 16)",
        "L004.npy: [npy-header] header shape is (72, 16), the manifest says (71, 16)",
        "L005.npy: [npy-header] header shape is (72, 16), the manifest says (71, 16)",
      ],
    ],
    [
      "an incomplete store",
      (s: string) =>
        editManifest(s, (m) => {
          m.complete = false;
          m.rows_done = 40;
        }),
      ["index.json: [incomplete] the store is incomplete: 40 of 72 rows written and no checksums yet"],
    ],
    [
      "a duplicate query id",
      (s: string) => editManifest(s, (m) => (m.query_ids[5] = m.query_ids[4])),
      [/^index\.json: \[manifest-field\] "query_ids" lists "query_\d+" twice$/],
    ],
    [
      "a query id repeated far from its first place, among ids out of order",
      (s: string) =>
        editManifest(s, (m) => {
          m.query_ids.reverse();
          m.query_ids[60] = m.query_ids[3];
        }),
      [/^index\.json: \[manifest-field\] "query_ids" lists "query_\d+" twice$/],
    ],
    [
      "a non-finite count that disagrees with the data",
      (s: string) => editManifest(s, (m) => (m.files["L005.npy"].nonfinite = 0)),
      ["L005.npy: [nonfinite] holds 2 non-finite values, the manifest says 0"],
    ],
    // A malformed field is reported once, as malformed, and not compared with the file as well.
    [
      "a checksum in upper-case hex",
      (s: string) => editManifest(s, (m) => (m.files["L003.npy"].sha256 = m.files["L003.npy"].sha256.toUpperCase())),
      ['index.json: [manifest-field] "files.L003.npy.sha256" expected 64 lowercase hex digits'],
    ],
    [
      "a fractional non-finite count",
      (s: string) => editManifest(s, (m) => (m.files["L005.npy"].nonfinite = 2.5)),
      ['index.json: [manifest-field] "files.L005.npy.nonfinite" expected a non-negative integer'],
    ],
    [
      "a negative largest magnitude",
      (s: string) => editManifest(s, (m) => (m.files["L004.npy"].max_abs = -1)),
      ['index.json: [manifest-field] "files.L004.npy.max_abs" expected a non-negative number or null'],
    ],
    [
      "a layer list that disagrees with the files",
      (s: string) => editManifest(s, (m) => m.layers.push(9)),
      [
        'index.json: [manifest-field] "layers" holds a layer outside 0…5',
        'index.json: [manifest-field] "files" has no entry for layer 9 (L009.npy)',
      ],
    ],
    [
      "a failed self-check that names no layer",
      (s: string) => editManifest(s, (m) => (m.self_check = { rows: 4, layers: [], status: "fail" })),
      ['index.json: [manifest-field] "self_check" a fail status needs the layers it found'],
    ],
    [
      "a failed self-check without its tolerance",
      (s: string) =>
        editManifest(
          s,
          (m) => (m.self_check = { rows: 4, layers: [{ layer: 2, max_abs_dev: 1, max_rel_dev: 1 }], status: "fail" }),
        ),
      ['index.json: [manifest-field] "self_check" "tolerance" expected a non-negative number but found nothing'],
    ],
    [
      "a self-check layer that is not one",
      (s: string) => editManifest(s, (m) => (m.self_check = { rows: 4, layers: [null], status: "pass" })),
      [
        'index.json: [manifest-field] "self_check" "layers" entry 0 is null, expected {layer, max_abs_dev, max_rel_dev}',
      ],
    ],
    [
      "a file resaved in NPY format 2.0",
      (s: string) => resave(s, "L003.npy", 2, 64),
      ["L003.npy: [npy-header] is NPY format version 2.0; an hsm store's files are version 1.0"],
    ],
    [
      "a file resaved with its data on a 16-byte boundary (NumPy before 1.14)",
      (s: string) => resave(s, "L004.npy", 1, 16),
      ["L004.npy: [npy-header] its data starts at byte 80, not on a 64-byte boundary as an hsm store's files do"],
    ],
  ])("reports %s", async (_what, change, expected) => {
    const store = corrupt(change);
    const r = await verifyStore(store);
    expect(r.ok).toBe(false);
    const got = lines(r);
    expect(got).toHaveLength(expected.length);
    expected.forEach((want, i) =>
      typeof want === "string" ? expect(got[i]).toBe(want) : expect(got[i]).toMatch(want),
    );
  });

  it("refuses a width of 0 first, then each file it disagrees with", async () => {
    const got = lines(await verifyStore(corrupt((s) => editManifest(s, (m) => (m.d_model = 0)))));
    expect(got[0]).toBe('index.json: [manifest-field] "d_model" expected a positive integer but found 0');
    // Every file's width then disagrees with it: four files, each in its entry and its header.
    expect(got).toHaveLength(9);
    expect(got.slice(1).every((l) => /^(index\.json: \[manifest-field\]|L00\d\.npy: \[npy-header\]) /.test(l))).toBe(
      true,
    );
  });

  it("holds an adopted store's files (no model_sha256) only to what NumPy reads", async () => {
    const store = corrupt((s) => {
      resave(s, "L003.npy", 2, 64);
      resave(s, "L004.npy", 1, 16);
      editManifest(s, (m) => (m.model_sha256 = ""));
    });
    const r = await verifyStore(store);
    expect(lines(r)).toEqual([]);
    expect(r.ok).toBe(true);
    // Read back as NumPy would: the same rows as the store they came from.
    const [mine, theirs] = [await StoreReader.open(store), await StoreReader.open(good)];
    for (const layer of [3, 4]) expect(await mine.readRows(layer, 0, 72)).toEqual(await theirs.readRows(layer, 0, 72));
  });

  it("notes, and does not refuse, a complete manifest another tool wrote to the contract without a seal", async () => {
    // contracts.md's index.json has no manifest_sha256: a script following it writes every field but that one.
    const store = corrupt((s) =>
      tamper(s, (m) => {
        delete m.manifest_sha256;
        m.tool_version = "my-extractor 2.1";
      }),
    );
    const r = await verifyStore(store);
    expect(lines(r)).toEqual([]);
    expect(r.ok).toBe(true);
    expect(r.notes).toEqual([
      {
        file: "index.json",
        note: "not-recorded",
        message:
          'records no manifest_sha256 (optional; written by "my-extractor 2.1", not hsm), so its labels and settings were not checked against a seal',
      },
    ]);
    // Every other field is still checked: a fact_ids list one entry short is reported.
    const short = corrupt((s) =>
      tamper(s, (m) => {
        delete m.manifest_sha256;
        m.tool_version = "my-extractor 2.1";
        m.fact_ids.pop();
      }),
    );
    expect(lines(await verifyStore(short))).toEqual([
      `index.json: [manifest-field] "fact_ids" has ${72 - 1} entries but query_ids has 72: one per row is required`,
    ]);
  });

  it("holds files another tool wrote in the contract's format only to what NumPy reads, not to hsm's layout", async () => {
    // An older NumPy pads headers to 16 bytes; numpy.save writes version 2.0 for long headers.
    const store = corrupt((s) => {
      resave(s, "L004.npy", 1, 16);
      resave(s, "L003.npy", 2, 64);
      tamper(s, (m) => {
        delete m.manifest_sha256;
        m.tool_version = "my-extractor 2.1";
      });
    });
    expect(lines(await verifyStore(store))).toEqual([]);
  });

  it("takes checksums in either case from a manifest another tool wrote to the contract", async () => {
    const upper = (m: Json) => {
      delete m.manifest_sha256;
      m.tool_version = "my-extractor 2.1";
      for (const e of Object.values(m.files) as Json[]) e.sha256 = e.sha256.toUpperCase();
    };
    const r = await verifyStore(corrupt((s) => tamper(s, upper)));
    expect(lines(r)).toEqual([]);
    // Compared without regard to case, a wrong one is still reported.
    const wrong = corrupt((s) =>
      tamper(s, (m) => {
        upper(m);
        m.files["L004.npy"].sha256 = "AB" + m.files["L004.npy"].sha256.slice(2);
      }),
    );
    expect(lines(await verifyStore(wrong))).toEqual([
      expect.stringMatching(/^L004\.npy: \[sha256\] sha256 is [0-9a-f]{64}, the manifest says ab[0-9a-f]{62}: /),
    ]);
  });

  it("refuses, in one line, a manifest nesting values deeper than any check walks", async () => {
    // 100,000 levels: deep enough to overflow any recursive walk (the seal's, an error message's JSON).
    const deep = "[".repeat(100_000) + "]".repeat(100_000);
    const store = corrupt((s) => {
      const path = join(s, "index.json");
      writeFileSync(path, readFileSync(path, "utf8").replace(/}\s*$/, `, "extra": ${deep}}`));
    });
    const message = "is not valid JSON (it nests arrays and objects more than 64 levels deep)";
    expect(lines(await verifyStore(store))).toEqual([`index.json: [manifest-json] ${message}`]);
    await expect(StoreReader.open(store)).rejects.toThrow(`${join(store, "index.json")}: ${message}`);
  });

  it("quotes at most 80 characters of a megabyte value in its one line, and calls an absent one missing", async () => {
    const store = corrupt((s) => tamper(s, (m) => (m.model = ["x".repeat(1 << 20)])));
    expect(lines(await verifyStore(store))).toEqual([
      `index.json: [manifest-field] "model" expected a string but found ["${"x".repeat(78)}…`,
    ]);
    const absent = corrupt((s) => editManifest(s, (m) => delete m.files["L003.npy"].layer));
    expect(lines(await verifyStore(absent))).toEqual([
      'index.json: [manifest-field] "files.L003.npy.layer" is missing but the name says 3',
    ]);
  });

  it("quotes at most 80 characters of a megabyte layer rule, and of what it gives, in its one line", async () => {
    const unparsed = "l >= " + "1".repeat(1 << 20) + " +";
    const number = "1".repeat(1 << 20);
    const problems = async (rule: string) =>
      lines(await verifyStore(corrupt((s) => editManifest(s, (m) => (m.layer_rule = rule)))));
    const parse = await problems(unparsed);
    expect(parse).toHaveLength(1);
    expect(
      parse[0]!.startsWith(
        `index.json: [manifest-field] "layer_rule" Expected a layer rule such as "l/(L-1) >= 0.4" but could not parse "${unparsed.slice(0, 79)}…: `,
      ),
    ).toBe(true);
    expect(parse[0]!.length).toBeLessThan(300);
    // A rule that parses, padded to a megabyte, keeping other blocks than the store's.
    const padded = await problems("l >= 0" + " ".repeat(1 << 20));
    expect(padded).toHaveLength(1);
    expect(padded[0]).toMatch(
      /^index\.json: \[manifest-field\] "layers" \[[\d, ]+\] are not the blocks layer_rule "l >= 0 {73}… keeps at num_layers \d+ \(\[0, 1, [\d, ]+\]\)$/,
    );
    const gives = await problems(number);
    expect(gives).toHaveLength(1);
    expect(gives[0]).toMatch(
      /^index\.json: \[manifest-field\] "layer_rule" Layer rule "1{79}… must give true or false, but gives 1{80}… at l = 0, L = \d+$/,
    );
  });

  it("takes distinct query ids in any order", async () => {
    const store = corrupt((s) => editManifest(s, (m) => m.query_ids.reverse()));
    const r = await verifyStore(store);
    expect(lines(r)).toEqual([]);
    expect(r.ok).toBe(true);
  });

  it.each([
    [
      "two fact ids swapped",
      (m: Json) => ([m.fact_ids[0], m.fact_ids[m.fact_ids.length - 1]] = [m.fact_ids.at(-1), m.fact_ids[0]]),
      true,
    ],
    ["a row relabelled to another family", (m: Json) => (m.condition_families[1] = "typo"), true],
    ["the model renamed", (m: Json) => (m.model = "someone-else"), true],
    // An older store's manifest has no seal: the metrics read it, verify says it cannot vouch for it.
    ["the seal removed", (m: Json) => delete m.manifest_sha256, false],
  ])("reports a manifest whose content changed after completion: %s", async (_name, edit, sealed) => {
    const store = corrupt((s) => tamper(s, edit));
    const got = lines(await verifyStore(store));
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(/^index\.json: \[manifest-checksum\] /);
    // The metrics refuse it too, where a seal is there to be broken.
    if (sealed)
      await expect(StoreReader.open(store)).rejects.toThrow(/"manifest_sha256" does not match the manifest's content/);
  });

  /** Whether the Python recipe docs/formats.md gives for recomputing the seal accepts `manifest`'s seal. */
  const docRecipeAccepts = (manifest: object): boolean => {
    const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "formats.md"), "utf8");
    const recipe = /#### Recomputing the seal[\s\S]*?```python\n([\s\S]*?)```/.exec(doc)![1]!;
    const at = join(dir, `recipe-${Math.random().toString(36).slice(2)}`);
    mkdirSync(at);
    writeFileSync(join(at, "index.json"), JSON.stringify(manifest));
    return spawnSync("/usr/bin/python3", ["-c", recipe], { cwd: at }).status === 0;
  };

  it("seals what the writer completed: docs/formats.md's Python recipe recomputes the seal", async () => {
    const m = JSON.parse(readFileSync(join(good, "index.json"), "utf8"));
    expect(docRecipeAccepts(m)).toBe(true);
    expect(docRecipeAccepts({ ...m, model: `${m.model}x` })).toBe(false);
  });

  it("hashes every JSON kind as canonical JSON that docs/formats.md's Python recipe recomputes", () => {
    const content = {
      z: ['a"b', "é\u2028", "", "\\", "\u0001\u007f"],
      a: [1, -2, 0, 3.5, null, true, false, "x"],
      // Numbers Python's json.dumps writes otherwise: 3.2e-05, 1e-07, 1e+16, 1.7976931348623157e+308.
      n: [0.000032, 1e-7, 1.25e-7, 1e16, 1e21, 123456789.5, 5e-324, 1.7976931348623157e308, -0.5, 2 ** 60],
      m: [[], [1, [2, "3"]], [{ b: 1, a: [null] }], {}],
      // Keys past the Basic Multilingual Plane sort by UTF-16 code unit, before U+FFFD.
      k: { y: [true], x: "v", "\ufffd": 1, "\u{1f600}": 2, é: 3 },
    };
    const manifest = { ...content, manifest_sha256: manifestContentSha256(content) };
    expect(docRecipeAccepts(manifest)).toBe(true);
    expect(docRecipeAccepts({ ...manifest, n: [...content.n, 0.1] })).toBe(false);
  });

  it("reports layers that are not what the layer rule keeps at the block count", async () => {
    // A rule changed and resealed: the checksum holds, the layers do not follow from the rule.
    const store = corrupt((s) => editManifest(s, (m) => (m.layer_rule = "l >= 4")));
    expect(lines(await verifyStore(store))).toEqual([
      'index.json: [manifest-field] "layers" [2, 3, 4, 5] are not the blocks layer_rule "l >= 4" keeps at num_layers 6 ([4, 5])',
    ]);
  });

  it("throws, naming it, for a store folder that is missing or not a folder", async () => {
    const missing = join(dir, "no-store");
    await expect(verifyStore(missing)).rejects.toMatchObject({
      constructor: FileError,
      message: `${missing}: does not exist`,
      exitCode: EXIT.data,
    });
    const file = join(good, "L002.npy");
    await expect(verifyStore(file)).rejects.toMatchObject({
      constructor: FileError,
      message: `${file}: is not a folder; a store is a folder holding index.json and L###.npy files`,
      exitCode: EXIT.data,
    });
  });
});

describe("verifyStore on a manifest's per-row lists read as text", () => {
  /** The good store with its manifest edited (the seal kept as it was) and written compactly or indented. */
  function rewritten(edit: (m: Json) => void, indent: number | undefined): string {
    return corrupt((store) => {
      const path = join(store, "index.json");
      const m = JSON.parse(readFileSync(path, "utf8"));
      edit(m);
      writeFileSync(path, JSON.stringify(m, null, indent));
    });
  }

  it.skipIf(!nativeJsonRowArrays)("reads hsm's own manifest's lists as text", () => {
    const found = nativeJsonRowArrays!(readFileSync(join(good, "index.json")), [...ROW_LISTS]);
    expect(found && [found[2], found[6], found[10], found[3]]).toEqual([72, 72, 72, 1]);
  });

  // Written compactly, the lists are read as text (where the native core is built); indented, whitespace inside
  // them makes verify parse the manifest whole. Both must report the same.
  it.each([
    ["nothing changed", () => {}],
    ["a fact id changed after sealing", (m: Json) => (m.fact_ids[3] = "fact_x")],
    ["a family changed after sealing", (m: Json) => (m.condition_families[0] = "typo")],
    ["a query id changed after sealing", (m: Json) => (m.query_ids[7] += "x")],
    ["a query id repeated", (m: Json) => (m.query_ids[5] = m.query_ids[4])],
    ["query ids out of order", (m: Json) => m.query_ids.reverse()],
    ["a row missing from fact_ids", (m: Json) => m.fact_ids.pop()],
    ["query_ids missing", (m: Json) => delete m.query_ids],
    ["an id with an escape", (m: Json) => (m.query_ids[0] = 'q"0')],
    ["an id beyond ASCII", (m: Json) => (m.fact_ids[0] = "fakt_ü")],
    ["a list that is not all strings", (m: Json) => (m.fact_ids[2] = 7)],
  ])("reports the same either way: %s", async (_what, edit) => {
    const [text, parsed] = await Promise.all([undefined, 2].map((indent) => verifyStore(rewritten(edit, indent))));
    expect(lines(text!)).toEqual(lines(parsed!));
    const facts = (r: VerifyReport) => [r.ok, r.rows, r.complete, r.rows_done, r.files.map((f) => [f.sha256, f.ok])];
    expect(facts(text!)).toEqual(facts(parsed!));
  });
});

/**
 * The native core hashes a store's files where the page cache holds them, mapped into memory. A file cut short
 * after it was mapped leaves pages that are gone: touching them raises SIGBUS. A preloaded `mmap` cuts every mapped
 * layer file to half its length right after mapping it, so that each hash runs into those pages; verify must report
 * the files as they now are, and not die of the signal. With SHIM_GROW set it appends to each file instead: the
 * bytes past the mapping must be hashed too.
 */
const compiler = (() => {
  try {
    execFileSync("cc", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

describe.skipIf(!compiler || process.platform !== "linux")("verify of files changed after they were mapped", () => {
  const SHIM = String.raw`
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static void* cut(void* p, size_t n, int fd);
void* mmap(void* at, size_t n, int prot, int flags, int fd, off_t off) {
  static void* (*real)(void*, size_t, int, int, int, off_t);
  if (!real) real = (void* (*)(void*, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
  return cut(real(at, n, prot, flags, fd, off), n, fd);
}
void* mmap64(void* at, size_t n, int prot, int flags, int fd, off_t off) { return mmap(at, n, prot, flags, fd, off); }
static void* cut(void* p, size_t n, int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t k = fd >= 0 && p != MAP_FAILED ? readlink(link, path, sizeof path - 1) : -1;
  if (k > 4 && memcmp(path + k - 4, ".npy", 4) == 0) {
    path[k] = 0;
    if (getenv("SHIM_GROW") == NULL) truncate(path, (off_t)(n / 2));
    else {
      FILE* f = fopen(path, "ab");
      fputs("grown after it was mapped", f);
      fclose(f);
    }
  }
  return p;
}
`;

  it.each([
    ["cut short", (size: number) => Math.floor(size / 2), {}],
    ["grown", (size: number) => size + "grown after it was mapped".length, { SHIM_GROW: "1" }],
  ])("reports each file as it now is, and exits 1: %s", async (what, length, env) => {
    const root = join(dir, `mapped-${what.replace(" ", "-")}`);
    await writeFixture(join(root, "fx"), { facts: 40, d: 512, layersTotal: 6, seed: 8 });
    const store = join(root, "fx", "store");
    writeFileSync(join(root, "shim.c"), SHIM);
    execFileSync("cc", ["-shared", "-fPIC", "-O1", "-o", join(root, "shim.so"), join(root, "shim.c"), "-ldl"]);
    const files = ["L002.npy", "L003.npy", "L004.npy", "L005.npy"];
    const sizes = files.map((f) => statSync(join(store, f)).size);
    const recorded = JSON.parse(readFileSync(join(store, "index.json"), "utf8")).files;
    const bin = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
    const r = await runChild(process.execPath, [bin, "verify", store], {
      env: { ...process.env, ...env, LD_PRELOAD: join(root, "shim.so") },
    });
    expect(r.signal).toBeNull();
    expect(r.status).toBe(EXIT.data);
    for (const [i, name] of files.entries()) {
      // Changed after the size checks had passed: the digest of the file as it now is tells.
      const now = readFileSync(join(store, name));
      expect(now.length).toBe(length(sizes[i]!));
      const sha = createHash("sha256").update(now).digest("hex");
      expect(r.stdout).toContain(
        `${name}: sha256 is ${sha}, the manifest says ${recorded[name].sha256}: the file changed after it was written`,
      );
    }
  });
});
