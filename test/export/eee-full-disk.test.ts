/**
 * An Every Eval Ever export on a disk that fills between its two files leaves no half of a record: the samples
 * file it linked into place is taken back when the aggregate cannot be written, and a rerun with room writes the
 * whole record. The file system is a small tmpfs of the test's own, so these cases need root (CI runs as root);
 * elsewhere they are skipped.
 */
import { execFileSync } from "node:child_process";
import { appendFileSync, mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { FileError } from "../../src/errors.js";
import { exportScored } from "../../src/export/export.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-eee-full-");
const fx = { bank: join(dir, "fx", "bank.jsonl"), scored: join(dir, "fx", "scored.jsonl") };
const PAGE = 4096;

/** Every file under `folder`, by path relative to it. */
function files(folder: string): string[] {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(folder.length + 1))
    .sort();
}

describe.skipIf(process.getuid?.() !== 0)("an EEE export on a disk that fills (needs root to mount a tmpfs)", () => {
  let mnt: string;
  beforeAll(async () => {
    await writeFixture(join(dir, "fx"), { facts: 30, d: 8 });
    mnt = mkdtempSync(join(tmpdir(), "hsm-eee-full-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt]);
  });
  afterAll(() => {
    execFileSync("umount", ["--lazy", mnt]);
    rmSync(mnt, { recursive: true, force: true });
  });

  it.each([false, true])(
    "with room for the samples but not the aggregate (replace: %s), leaves neither, then writes both",
    async (replace) => {
      const settings = { format: "eee", scored: fx.scored, bank: fx.bank, modelId: "hsm/x", replace };
      const sizes = await exportScored({ ...settings, out: join(dir, `sizes-${replace}`) });
      const samplesBytes = statSync(sizes.files[1]!).size;
      expect(statSync(sizes.files[0]!).size).toBeGreaterThan(PAGE);
      // Fill the file system, then free the samples' pages and one more: too few for the aggregate.
      const filler = join(mnt, "filler");
      for (;;) {
        try {
          appendFileSync(filler, Buffer.alloc(64 * PAGE, 1));
        } catch {
          break;
        }
      }
      for (let n = 32; n >= 1; n >>= 1) {
        try {
          appendFileSync(filler, Buffer.alloc(n * PAGE, 1));
        } catch {
          /* smaller pieces next */
        }
      }
      truncateSync(filler, statSync(filler).size - PAGE * (Math.ceil(samplesBytes / PAGE) + 1));
      const out = join(mnt, `eee-${replace}`);
      const err = await exportScored({ ...settings, out }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FileError);
      expect((err as FileError).message).toMatch(/\.json: cannot be written: no space left on device \(ENOSPC\)$/);
      expect(files(out)).toEqual([]);
      rmSync(filler);
      const r = await exportScored({ ...settings, out });
      expect(files(out)).toEqual(r.files.map((f) => f.slice(out.length + 1)).sort());
    },
  );
});
