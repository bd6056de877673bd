/** Store locks on a shared file system: another host's lock holds while touched and is taken over once stale. */
import { existsSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { acquireLock } from "../../src/store/lock.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-lock-");

function foreignLock(name: string, minutesAgo: number): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify({ pid: 1, host: "node-elsewhere", started: "2026-01-01T00:00:00.000Z" }) + "\n");
  const at = new Date(Date.now() - minutesAgo * 60_000);
  utimesSync(path, at, at);
  return path;
}

describe("acquireLock across hosts", () => {
  it("refuses a lock another host touched within ten minutes", async () => {
    foreignLock("fresh.lock", 9);
    await expect(acquireLock(dir, "fresh.lock")).rejects.toThrow(
      `${dir}: is being written by another hsm process (pid 1 on node-elsewhere, since 2026-01-01T00:00:00.000Z)`,
    );
  });

  it("takes over a lock another host left untouched for longer", async () => {
    const path = foreignLock("stale.lock", 11);
    const release = await acquireLock(dir, "stale.lock");
    expect(JSON.parse(readFileSync(path, "utf8")).pid).toBe(process.pid);
    await release();
    expect(existsSync(path)).toBe(false);
  });
});
