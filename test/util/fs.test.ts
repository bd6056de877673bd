/**
 * The file helpers: operating-system errors become tagged errors naming the
 * path and the reason; writeFileAtomic leaves the old content or the new, and
 * never a temporary file, whatever fails.
 */
import { linkSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, FileError, HsmError, StoreError, UsageError } from "../../src/errors.js";
import {
  fileError,
  makeWorkFolder,
  osReason,
  readInputSync,
  readWhole,
  refuseInputAsOutput,
  writeFileAtomic,
  writeFileExclusive,
} from "../../src/util/fs.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-fs-");

/** An error as Node's fs module makes them. */
function errno(code: string, text: string, syscall = "open", path = "/x"): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: ${text}, ${syscall} '${path}'`), { code, syscall, path });
}

describe("fileError", () => {
  it("reports a missing file as missing", async () => {
    const path = join(dir, "absent.jsonl");
    const err = await readFile(path).catch((e: unknown) => e);
    const e = fileError(err, path);
    expect(e).toBeInstanceOf(FileError);
    expect(e).toMatchObject({
      message: `${path}: does not exist`,
      path,
      problem: "missing",
      code: "ENOENT",
      exitCode: EXIT.data,
      cause: err,
    });
  });

  it("reports a folder given as a file as unreadable, with the OS reason", async () => {
    const err = await readFile(dir).catch((e: unknown) => e);
    expect(fileError(err, dir)).toMatchObject({
      constructor: FileError,
      message: `${dir}: cannot be read: it is a directory (EISDIR)`,
      problem: "unreadable",
      code: "EISDIR",
      exitCode: EXIT.data,
    });
  });

  it.each([
    ["EACCES", "permission denied", "read", "bank.jsonl: cannot be read: permission denied (EACCES)"],
    ["EIO", "i/o error", "read", "bank.jsonl: cannot be read: input/output error (EIO)"],
    ["ENOSPC", "no space left on device", "write", "bank.jsonl: cannot be written: no space left on device (ENOSPC)"],
    ["EROFS", "read-only file system", "write", "bank.jsonl: cannot be written: read-only file system (EROFS)"],
    [
      "ENOENT",
      "no such file or directory",
      "write",
      "bank.jsonl: cannot be written: its folder does not exist (ENOENT)",
    ],
    // A code hsm has no words for keeps the operating system's own.
    ["ESTALE", "stale file handle", "read", "bank.jsonl: cannot be read: stale file handle (ESTALE)"],
  ] as const)("words %s on %s", (code, text, action, message) => {
    const e = fileError(errno(code, text), "bank.jsonl", action);
    expect(e).toBeInstanceOf(FileError);
    expect(e).toMatchObject({
      message,
      code,
      problem: action === "read" ? "unreadable" : "unwritable",
      exitCode: EXIT.data,
    });
  });

  it("passes hsm's own errors and errors without an errno code through unchanged", () => {
    const own = new StoreError("s", "is broken");
    expect(fileError(own, "x")).toBe(own);
    const bug = new TypeError("x is not a function");
    expect(fileError(bug, "x")).toBe(bug);
    expect(fileError(bug, "x")).not.toBeInstanceOf(HsmError);
  });

  it("says why in words and code for the reports that list problems", () => {
    expect(osReason(errno("EISDIR", "illegal operation on a directory", "read"))).toBe("it is a directory (EISDIR)");
    expect(osReason({ message: "something odd" })).toBe("something odd");
  });
});

describe("writeFileAtomic", () => {
  it("writes text, bytes and pieces, and leaves no temporary file", async () => {
    const folder = join(dir, "ok");
    mkdirSync(folder);
    await writeFileAtomic(join(folder, "a.txt"), "héllo\n");
    await writeFileAtomic(join(folder, "b.bin"), Uint8Array.from([0, 255, 7]));
    await writeFileAtomic(join(folder, "c.txt"), ["one,", Uint8Array.from([0x74, 0x77, 0x6f]), ",three"]);
    expect(readFileSync(join(folder, "a.txt"), "utf8")).toBe("héllo\n");
    expect(Array.from(readFileSync(join(folder, "b.bin")))).toEqual([0, 255, 7]);
    expect(readFileSync(join(folder, "c.txt"), "utf8")).toBe("one,two,three");
    await writeFileAtomic(join(folder, "a.txt"), "replaced");
    expect(readFileSync(join(folder, "a.txt"), "utf8")).toBe("replaced");
    expect(readdirSync(folder).sort()).toEqual(["a.txt", "b.bin", "c.txt"]);
  });

  it("keeps the old content and removes its temporary file when the data fails midway", async () => {
    const folder = join(dir, "fail-midway");
    mkdirSync(folder);
    const path = join(folder, "scored.jsonl");
    writeFileSync(path, "old\n");
    const full = errno("ENOSPC", "no space left on device", "write", path);
    async function* pieces() {
      yield "new line 1\n";
      yield "new line 2\n";
      throw full;
    }
    const err = await writeFileAtomic(path, pieces()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect(err).toMatchObject({
      message: `${path}: cannot be written: no space left on device (ENOSPC)`,
      problem: "unwritable",
      code: "ENOSPC",
      exitCode: EXIT.data,
      cause: full,
    });
    expect(readFileSync(path, "utf8")).toBe("old\n");
    expect(readdirSync(folder)).toEqual(["scored.jsonl"]);
  });

  it("keeps what is there and removes its temporary file when the rename fails", async () => {
    const folder = join(dir, "fail-rename");
    mkdirSync(join(folder, "target", "inside"), { recursive: true });
    const path = join(folder, "target");
    await expect(writeFileAtomic(path, "text")).rejects.toMatchObject({
      constructor: FileError,
      message: `${path}: cannot be written: it is a directory (EISDIR)`,
      exitCode: EXIT.data,
    });
    expect(readdirSync(folder)).toEqual(["target"]);
    expect(readdirSync(path)).toEqual(["inside"]);
  });

  it("names the path when its folder does not exist", async () => {
    const path = join(dir, "no-such-folder", "out.jsonl");
    await expect(writeFileAtomic(path, "x")).rejects.toMatchObject({
      constructor: FileError,
      message: `${path}: cannot be written: its folder does not exist (ENOENT)`,
      exitCode: EXIT.data,
    });
  });
});

describe("writeFileExclusive", () => {
  /** A link as a file system without hard links refuses it (FAT answers EPERM). */
  const noLinks = (_from: string, to: string) => Promise.reject(errno("EPERM", "operation not permitted", "link", to));

  it.each([
    ["with hard links", undefined],
    ["on a file system without them", noLinks],
  ])("%s, writes a new file whole and never replaces one, leaving no temporary file", async (what, linkFile) => {
    const folder = join(dir, `exclusive-${what.length}`);
    mkdirSync(folder);
    const path = join(folder, "record.json");
    expect(await writeFileExclusive(path, "first\n", linkFile)).toBe(true);
    expect(await writeFileExclusive(path, ["sec", "ond\n"], linkFile)).toBe(false);
    expect(readFileSync(path, "utf8")).toBe("first\n");
    expect(readdirSync(folder)).toEqual(["record.json"]);
  });

  it("names the path of any other failure and leaves no temporary file", async () => {
    const folder = join(dir, "exclusive-fails");
    mkdirSync(folder);
    const path = join(folder, "record.json");
    const denied = (_from: string, to: string) => Promise.reject(errno("EACCES", "permission denied", "link", to));
    await expect(writeFileExclusive(path, "x", denied)).rejects.toThrow(
      `${path}: cannot be written: permission denied (EACCES)`,
    );
    expect(readdirSync(folder)).toEqual([]);
  });
});

describe("readWhole", () => {
  it("reads what readFile reads, empty files included, and fails naming the file", async () => {
    const bytes = Buffer.alloc(3_000_001);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7919) & 0xff;
    writeFileSync(join(dir, "whole.bin"), bytes);
    writeFileSync(join(dir, "empty.bin"), "");
    expect((await readWhole(join(dir, "whole.bin"))).equals(await readFile(join(dir, "whole.bin")))).toBe(true);
    expect((await readWhole(join(dir, "empty.bin"))).length).toBe(0);
    const missing = join(dir, "missing.bin");
    await expect(readWhole(missing)).rejects.toMatchObject({
      constructor: FileError,
      code: "ENOENT",
      message: `${missing}: does not exist`,
    });
    await expect(readWhole(dir)).rejects.toMatchObject({ code: "EISDIR" });
  });

  it("names a link to nothing by where it points, and a loop of links by its reason", async () => {
    const dangling = join(dir, "dangling.onnx");
    symlinkSync("/nonexistent/blob", dangling);
    await expect(readWhole(dangling)).rejects.toMatchObject({
      constructor: FileError,
      code: "ENOENT",
      message: `${dangling}: is a symbolic link to /nonexistent/blob, which does not exist (ENOENT)`,
      exitCode: EXIT.data,
    });
    const loop = join(dir, "loop.onnx");
    symlinkSync("loop.onnx", loop);
    await expect(readWhole(loop)).rejects.toMatchObject({
      constructor: FileError,
      code: "ELOOP",
      message: `${loop}: cannot be read: too many levels of symbolic links (ELOOP)`,
      exitCode: EXIT.data,
    });
  });
});

describe("readInputSync with a range", () => {
  it("reads exactly the bytes asked for, and names a range the file ends inside", () => {
    const path = join(dir, "ranged.bin");
    writeFileSync(path, Buffer.from(Array.from({ length: 40 }, (_, i) => i)));
    expect([...readInputSync(path, {}, { offset: 5, length: 4 })]).toEqual([5, 6, 7, 8]);
    expect(readInputSync(path, {}, { offset: 40, length: 0 }).length).toBe(0);
    expect(() => readInputSync(path, {}, { offset: 38, length: 4 })).toThrow(
      new FileError(path, "unreadable", undefined, "ends before the 4 bytes at offset 38"),
    );
    expect(() => readInputSync(dir, {}, { offset: 0, length: 1 })).toThrow(FileError);
  });
});

describe("refuseInputAsOutput", () => {
  it("refuses an output that is an input, by its own name, a symbolic link or a hard link, naming both", async () => {
    const folder = join(dir, "same-path");
    mkdirSync(folder);
    const bank = join(folder, "bank.jsonl");
    const gens = join(folder, "gens.jsonl");
    writeFileSync(bank, "bank\n");
    writeFileSync(gens, "gens\n");
    symlinkSync(bank, join(folder, "soft.jsonl"));
    linkSync(gens, join(folder, "hard.jsonl"));
    const inputs = [
      { name: "--generations", path: gens },
      { name: "--bank", path: bank },
    ];
    const refused = (out: string, name: string, path: string) =>
      expect(refuseInputAsOutput({ name: "--out", path: out }, inputs)).rejects.toMatchObject({
        constructor: UsageError,
        message: `--out ${out}: is also ${name} (${path}), which this command reads; choose another file for --out`,
        exitCode: EXIT.usage,
      });
    await refused(bank, "--bank", bank);
    await refused(gens, "--generations", gens);
    await refused(join(folder, "soft.jsonl"), "--bank", bank);
    await refused(join(folder, "hard.jsonl"), "--generations", gens);
    await expect(refuseInputAsOutput({ name: "--out", path: join(folder, "new.jsonl") }, inputs)).resolves.toBe(
      undefined,
    );
    await expect(
      refuseInputAsOutput({ name: "<out>", path: folder }, [{ name: "<store>", path: folder }]),
    ).rejects.toThrow(
      `<out> ${folder}: is also <store> (${folder}), which this command reads; choose another folder for <out>`,
    );
    expect(readFileSync(bank, "utf8")).toBe("bank\n");
  });
});

describe("makeWorkFolder", () => {
  it("makes a new hidden folder beside the output, removing leftovers of this host's processes that have ended", async () => {
    const parent = join(dir, "work", "nested");
    const host = hostname();
    // No process has a pid this large (Linux caps pids at 2^22), so these are leftovers of ended runs.
    const ended = [`.fx.partial-${host}-999999999`, ".fx.partial-999999998"];
    const kept = [
      `.fx.partial-${host}-${process.ppid}`, // a live process: this one's parent
      ".fx.partial-another-host-999999997", // another host's, which cannot be checked from here
      ".other.partial-999999996", // another output's
    ];
    for (const name of [...ended, ...kept]) mkdirSync(join(parent, name, "store"), { recursive: true });
    const { dir: work, forget } = await makeWorkFolder(join(parent, "fx"), "partial");
    forget();
    expect(work).toBe(join(parent, `.fx.partial-${host}-${process.pid}`));
    expect(readdirSync(work)).toEqual([]);
    expect(readdirSync(parent).sort()).toEqual([...kept, `.fx.partial-${host}-${process.pid}`].sort());
  });
});
