/**
 * The one rule for files (src/util/fs.ts), on its own and through every
 * reader of a user's files: a link where a store holds its own files, a FIFO,
 * a device, an oversized file, a file that is not UTF-8 or starts with a
 * byte-order mark each get one error naming the file, exit status 1, and never
 * a hang or a read without end. Writers in place never write through a link.
 */
import { execFileSync, spawn } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { EXIT, HsmError } from "../../src/errors.js";
import {
  adoptStore,
  checkBank,
  computeMetrics,
  exportScored,
  mergeShards,
  readStudyFile,
  scoreFile,
  verifyStore,
} from "../../src/index.js";
import { StoreReader } from "../../src/store/reader.js";
import { writeFixture } from "../../src/synthetic/store.js";
import {
  invalidUtf8Offset,
  openInput,
  openOutput,
  readInput,
  readText,
  TEXT_FILE_MAX_BYTES,
  utf8Text,
} from "../../src/util/fs.js";
import { JSONL_LINE_MAX_BYTES } from "../../src/util/jsonl.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-rule-");
const fx = join(dir, "fx");

beforeAll(async () => {
  await writeFixture(fx, { facts: 6, d: 8, layersTotal: 6, seed: 11 });
});

/** A fresh copy of `from` at `name` under the test folder. */
function copy(from: string, name: string): string {
  const to = join(dir, name);
  rmSync(to, { recursive: true, force: true });
  cpSync(from, to, { recursive: true });
  return to;
}

/** Puts at `path` the hostile thing `kind` names. */
function plant(path: string, kind: Hostile, good: Buffer): void {
  rmSync(path, { force: true, recursive: true });
  switch (kind) {
    case "fifo":
      execFileSync("mkfifo", [path]);
      return;
    case "device":
      symlinkSync("/dev/zero", path);
      return;
    case "folder":
      mkdirSync(path);
      return;
    case "not-utf8":
      // A Latin-1 "é" inside the first line: 0xe9 followed by an ASCII byte.
      writeFileSync(path, Buffer.concat([good.subarray(0, 20), Buffer.from([0xe9]), good.subarray(20)]));
      return;
    case "bom":
      writeFileSync(path, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), good]));
      return;
    case "oversized":
      // A sparse file past every cap: refused by its size, or by its first line's length, never read whole.
      writeFileSync(path, good.subarray(0, 10));
      truncateSync(path, TEXT_FILE_MAX_BYTES + 1);
      return;
  }
}

type Hostile = "fifo" | "device" | "folder" | "not-utf8" | "bom" | "oversized";
const HOSTILE: Hostile[] = ["fifo", "device", "folder", "not-utf8", "bom", "oversized"];

/** What each hostile input must be called, in the one line that names it. */
const SAYS: Record<Hostile, RegExp> = {
  fifo: /FIFO/,
  device: /character device/,
  folder: /directory/,
  "not-utf8": /not valid UTF-8: byte 0xe9 at offset 20/,
  bom: /byte-order mark/,
  oversized: /is longer than 1048576 bytes|holds 268435457 bytes, more than the \d+/,
};

/** The error `run` ends with: an hsm error (exit 1) naming `path`, in one line, within a few seconds. */
async function expectRefused(run: () => Promise<unknown>, path: string, says: RegExp): Promise<void> {
  const err = await run().then(
    () => new Error("expected a refusal"),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(HsmError);
  const e = err as HsmError;
  expect(e.exitCode).toBe(EXIT.data);
  expect(e.message).toContain(path);
  expect(e.message).toMatch(says);
  expect(e.message).not.toContain("\n");
}

describe("strict UTF-8", () => {
  it("finds the first invalid byte exactly where a fatal TextDecoder rejects the text", () => {
    const strict = new TextDecoder("utf-8", { fatal: true });
    const rng = new Rng(7, 1);
    const pieces = ["a", "é", "€", "😀", "\u{10ffff}"].map((s) => Buffer.from(s));
    const bad = [[0xc0, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0xff], [0x80], [0xf8]];
    for (let trial = 0; trial < 2000; trial++) {
      const parts: number[] = [];
      const n = 1 + rng.int(8);
      for (let i = 0; i < n; i++) {
        if (rng.uniform() < 0.15) parts.push(...bad[rng.int(bad.length)]!);
        else parts.push(...pieces[rng.int(pieces.length)]!);
      }
      const bytes = Uint8Array.from(parts);
      const at = invalidUtf8Offset(bytes);
      const valid = (b: Uint8Array) => {
        try {
          strict.decode(b);
          return true;
        } catch {
          return false;
        }
      };
      expect(at === -1).toBe(valid(bytes));
      // Everything before the offset is valid; the sequence starting there is not.
      if (at !== -1) {
        expect(valid(bytes.subarray(0, at))).toBe(true);
        expect(valid(bytes.subarray(at, at + 4))).toBe(false);
      }
    }
  });

  it("names the offset of the bad byte, and a byte-order mark by name", () => {
    expect(() => utf8Text(Buffer.from([0x61, 0x62, 0xc3, 0x28]), "f.json")).toThrow(
      "f.json: is not valid UTF-8: byte 0xc3 at offset 2",
    );
    expect(() => utf8Text(Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d]), "f.json")).toThrow(
      "f.json: starts with a UTF-8 byte-order mark (EF BB BF); save it as UTF-8 without one",
    );
    expect(utf8Text(Buffer.from("¿Qué?"), "f.json")).toBe("¿Qué?");
  });
});

describe("inputs", () => {
  it("refuse a FIFO, a device and a folder before reading a byte", async () => {
    const good = Buffer.from('{"a": 1}\n');
    for (const kind of ["fifo", "device", "folder"] as const) {
      const path = join(dir, `in-${kind}`);
      plant(path, kind, good);
      await expectRefused(() => readInput(path, { follow: true }), path, SAYS[kind]);
    }
  });

  it("follow a link only where asked, and never to something that is not a regular file", async () => {
    const target = join(dir, "target.json");
    writeFileSync(target, "{}");
    const link = join(dir, "link.json");
    rmSync(link, { force: true });
    symlinkSync(target, link);
    expect(await readText(link, { follow: true })).toBe("{}");
    await expectRefused(() => readText(link), link, /is a symbolic link, which hsm does not follow here/);
  });

  it("refuse a file larger than its cap by its size, without reading it", async () => {
    const path = join(dir, "huge.json");
    writeFileSync(path, "");
    // A sparse file: its size is what is checked, and it takes no space.
    truncateSync(path, TEXT_FILE_MAX_BYTES + 1);
    await expectRefused(() => readText(path), path, new RegExp(`holds ${TEXT_FILE_MAX_BYTES + 1} bytes, more than`));
    const { fh, size } = await openInput(path, {});
    expect(size).toBe(TEXT_FILE_MAX_BYTES + 1);
    await fh.close();
  });
});

describe("outputs written in place", () => {
  it("never write through a link, nor into a FIFO", async () => {
    const victim = join(dir, "victim.npy");
    writeFileSync(victim, "untouched");
    const link = join(dir, "out-link.npy");
    rmSync(link, { force: true });
    symlinkSync(victim, link);
    for (const mode of ["create", "update", "append"] as const)
      await expectRefused(() => openOutput(link, mode), link, /symbolic link, which hsm does not write through/);
    expect(readFileSync(victim, "utf8")).toBe("untouched");
    const fifo = join(dir, "out-fifo");
    plant(fifo, "fifo", Buffer.alloc(0));
    await expectRefused(() => openOutput(fifo, "update"), fifo, /FIFO/);
  });
});

describe("every reader of a user's JSONL or study file", () => {
  const bankOf = () => join(fx, "bank.jsonl");
  const scoredOf = () => join(fx, "scored.jsonl");
  const readers: [string, (path: string) => Promise<unknown>, () => string][] = [
    ["check-bank: the bank", (p) => checkBank(p), bankOf],
    ["score: the bank", (p) => scoreFile({ bank: p, generations: scoredOf(), out: join(dir, "s.jsonl") }), bankOf],
    [
      "score: the generations",
      (p) => scoreFile({ bank: bankOf(), generations: p, out: join(dir, "s.jsonl") }),
      scoredOf,
    ],
    [
      "export: the scored rows",
      (p) =>
        exportScored({
          format: "foundry",
          scored: p,
          bank: bankOf(),
          out: join(dir, "f.jsonl"),
          modelId: "org/m",
        }),
      scoredOf,
    ],
    ["metrics: the scored rows", (p) => computeMetrics(join(fx, "store"), { scored: p }), scoredOf],
  ];
  for (const [name, read, good] of readers) {
    it.each(HOSTILE)(`${name}: %s`, async (kind) => {
      const path = join(dir, `hostile-${name.replace(/\W+/g, "-")}-${kind}.jsonl`);
      plant(path, kind, readFileSync(good()));
      await expectRefused(() => read(path), path, SAYS[kind]);
    });
  }

  it("a line longer than any record is refused by its line number, before it is held whole", async () => {
    const path = join(dir, "long-line.jsonl");
    const lines = readFileSync(bankOf(), "utf8").split("\n");
    const long = `{"query_id": "x", "query": "${"a".repeat(JSONL_LINE_MAX_BYTES)}"}`;
    writeFileSync(path, [lines[0], long, ...lines.slice(1)].join("\n"));
    await expectRefused(() => checkBank(path), `${path}:2`, /is longer than \d+ bytes/);
  });

  it.each(HOSTILE)("study file: %s", async (kind) => {
    const path = join(dir, `study-${kind}.yaml`);
    plant(path, kind, Buffer.from("bank: bank.jsonl # the questions\nmodels:\n  - name: m\n    model_dir: m\n"));
    await expectRefused(() => readStudyFile(path), path, SAYS[kind]);
  });
});

describe("every reader of a store's index.json", () => {
  const readers: [string, (store: string) => Promise<unknown>][] = [
    ["open", (s) => StoreReader.open(s)],
    ["metrics", (s) => computeMetrics(s)],
    ["adopt", (s) => adoptStore(s, { model: "m", bank: join(fx, "bank.jsonl") })],
    ["merge", (s) => mergeShards(join(dir, "merged-out"), [s])],
  ];
  const kinds = [...HOSTILE, "link"] as const;
  for (const [name, read] of readers) {
    it.each(kinds)(`${name}: %s`, async (kind) => {
      const store = copy(join(fx, "store"), `store-${name}-${kind}`);
      const index = join(store, "index.json");
      const good = readFileSync(index);
      if (kind === "link") {
        const elsewhere = join(dir, `elsewhere-${name}.json`);
        writeFileSync(elsewhere, good);
        rmSync(index);
        symlinkSync(elsewhere, index);
      } else plant(index, kind, good);
      // Inside a store no link is followed: the device is refused as the link it is.
      const says = kind === "link" || kind === "device" ? /symbolic link/ : SAYS[kind];
      // merge names the shard, then the problem verify found in its index.json.
      await expectRefused(
        () => read(store),
        name === "merge" ? `${store}: shard does not verify (index.json` : index,
        says,
      );
    });
  }

  it("verify reports each as one problem of index.json, and never hangs", async () => {
    for (const kind of [...HOSTILE, "link"] as const) {
      const store = copy(join(fx, "store"), `store-verify-${kind}`);
      const index = join(store, "index.json");
      const good = readFileSync(index);
      if (kind === "link") {
        writeFileSync(join(dir, "elsewhere-verify.json"), good);
        rmSync(index);
        symlinkSync(join(dir, "elsewhere-verify.json"), index);
      } else plant(index, kind, good);
      const report = await verifyStore(store);
      expect(report.ok).toBe(false);
      const problem = report.problems.find((p) => p.file === "index.json");
      expect(problem, kind).toBeDefined();
      expect(problem!.message).toMatch(kind === "link" || kind === "device" ? /symbolic link/ : SAYS[kind]);
    }
  });
});

describe("the in-place writers of a store", () => {
  it("a resume refuses a layer file linked to another store's, which stays untouched", async () => {
    const { StoreWriter } = await import("../../src/store/writer.js");
    const ids = ["a", "b", "c", "d"];
    const init = {
      model: "m",
      model_sha256: "e".repeat(64),
      num_layers: 4,
      d_model: 4,
      layers: [2, 3],
      layer_rule: "l/(L-1) >= 0.4",
      last_layer_final_norm: true,
      dtype: "float32",
      query_ids: ids,
      fact_ids: ids,
      condition_families: ids.map(() => "anchor"),
    };
    const other = join(dir, "other-store");
    const mine = join(dir, "my-store");
    for (const store of [other, mine]) {
      rmSync(store, { recursive: true, force: true });
      const w = await StoreWriter.open(store, init);
      await w.writeRowsF32(2, 0, new Float32Array(8).fill(store === other ? 7 : 1));
      await w.writeRowsF32(3, 0, new Float32Array(8).fill(store === other ? 7 : 1));
      await w.commit(2);
      await w.close();
    }
    const before = readFileSync(join(other, "L003.npy"));
    rmSync(join(mine, "L003.npy"));
    symlinkSync(join(other, "L003.npy"), join(mine, "L003.npy"));
    await expectRefused(
      () => StoreWriter.open(mine, init),
      join(mine, "L003.npy"),
      /symbolic link, which hsm does not write through/,
    );
    expect(readFileSync(join(other, "L003.npy")).equals(before)).toBe(true);
  });

  it("a store killed while its layer files are made has its manifest first, and is refused by adopt", async () => {
    const store = join(dir, "killed-early");
    const writer = join(import.meta.dirname, "..", "..", "dist", "store", "writer.js");
    // Layer files large enough that making them takes a while: the kill lands while they are allocated.
    const script = `
      const { StoreWriter } = await import(${JSON.stringify(writer)});
      const ids = Array.from({ length: 20000 }, (_, i) => "q" + i);
      await StoreWriter.open(${JSON.stringify(store)}, {
        model: "m", model_sha256: "f".repeat(64), num_layers: 8, d_model: 1024, layers: [4, 5, 6, 7],
        layer_rule: "l/(L-1) >= 0.4", last_layer_final_norm: true, dtype: "float32",
        query_ids: ids, fact_ids: ids, condition_families: ids.map(() => "anchor"),
      });
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "ignore" });
    const seen: string[][] = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 30_000) {
      const names = existsSync(store) ? readdirSync(store).filter((n) => !n.startsWith(".")) : [];
      if (names.some((n) => n.endsWith(".npy"))) seen.push(names);
      if (names.includes("L007.npy") || child.exitCode !== null) break;
    }
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(seen.length).toBeGreaterThan(0);
    // Whenever a layer file was there, so was the manifest that says the store is unfinished.
    for (const names of seen) expect(names).toContain("index.json");
    await expectRefused(
      () => adoptStore(store, { bank: join(fx, "bank.jsonl") }),
      store,
      /is an unfinished hsm store \(0 of 20000 rows written\)/,
    );
    const report = await verifyStore(store);
    expect(report.ok).toBe(false);
    expect(report.complete).toBe(false);
  });
});
