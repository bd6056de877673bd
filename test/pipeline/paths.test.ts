/** Missing, present, and present-but-unreadable paths are told apart, with the OS's reason. */
import { chmodSync, mkdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { HsmError, UsageError } from "../../src/errors.js";
import { mtimeOf, pathKind, requireStoreFolder } from "../../src/pipeline/paths.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-paths-");
const file = join(dir, "file.txt");
const folder = join(dir, "folder");
const loop = join(dir, "loop");
writeFileSync(file, "x");
mkdirSync(folder);
symlinkSync(loop, loop);
// Permission bits do not stop root, so the permission cases run only for other users.
const root = process.getuid?.() === 0;

describe("pathKind", () => {
  it("says missing, file or folder", async () => {
    expect(await pathKind(join(dir, "nothing"), "bank")).toBe("missing");
    expect(await pathKind(file, "bank")).toBe("file");
    expect(await pathKind(folder, "bank")).toBe("folder");
  });

  it("reports any other failure as unreadable, with the OS's reason", async () => {
    await expect(pathKind(loop, "demo model")).rejects.toThrow(
      new HsmError(`${loop}: the demo model cannot be read (ELOOP: too many symbolic links encountered)`),
    );
    const long = join(dir, "x".repeat(300));
    await expect(pathKind(long, "bank")).rejects.toThrow(
      `${long}: the bank cannot be read (ENAMETOOLONG: name too long)`,
    );
  });
});

describe("mtimeOf", () => {
  it("is undefined for a missing path, the file's mtime otherwise, and an error when unreadable", async () => {
    expect(await mtimeOf(join(dir, "nothing"), "scored file")).toBeUndefined();
    expect(await mtimeOf(file, "scored file")).toBe(statSync(file).mtimeMs);
    await expect(mtimeOf(loop, "scored file")).rejects.toThrow(`${loop}: the scored file cannot be read (ELOOP`);
  });
});

describe("requireStoreFolder", () => {
  it("accepts a folder; a missing one or a file is a usage error naming what is there", async () => {
    await expect(requireStoreFolder(folder)).resolves.toBeUndefined();
    const missing = requireStoreFolder(join(dir, "nothing"));
    await expect(missing).rejects.toBeInstanceOf(UsageError);
    await expect(missing).rejects.toThrow(`${join(dir, "nothing")}: no such store folder`);
    await expect(requireStoreFolder(file)).rejects.toThrow(new UsageError(`${file}: is a file, not a store folder`));
  });

  it.skipIf(root)(
    "reports a folder it may not read as unreadable, not missing (skipped as root: permissions do not stop root)",
    async () => {
      const locked = join(dir, "locked");
      mkdirSync(locked);
      chmodSync(locked, 0o000);
      try {
        const err = await requireStoreFolder(locked).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(HsmError);
        expect(err).not.toBeInstanceOf(UsageError);
        expect((err as Error).message).toBe(`${locked}: the store folder cannot be read (EACCES: permission denied)`);
      } finally {
        chmodSync(locked, 0o700);
      }
    },
  );
});
