/**
 * Store locks: never two holders, whether processes race for a free folder or for one holding a stale lock; on a
 * shared file system another host's lock holds while touched and is taken over once stale.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { describe, expect, it } from "vitest";

import { acquireLock } from "../../src/store/lock.js";
import { runChild } from "../helpers/child.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-lock-");

function foreignLock(name: string, minutesAgo: number): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify({ pid: 1, host: "node-elsewhere", started: "2026-01-01T00:00:00.000Z" }) + "\n");
  const at = new Date(Date.now() - minutesAgo * 60_000);
  utimesSync(path, at, at);
  return path;
}

/** The most processes a race's log ("in" when one takes the lock, "out" when it lets go) shows holding it at once. */
function mostHolders(log: readonly string[]): number {
  let holders = 0;
  let most = 0;
  for (const line of log) {
    holders += line === "in" ? 1 : line === "out" ? -1 : 0;
    most = Math.max(most, holders);
  }
  return most;
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

describe("acquireLock between processes", () => {
  it("refuses a lock that names no process yet, and takes over one left so for half a minute", async () => {
    // What a second process sees while the first fills a lock created where the file system has no hard links.
    writeFileSync(join(dir, "empty.lock"), "");
    await expect(acquireLock(dir, "empty.lock")).rejects.toThrow(
      /is being written by another hsm process \(its lock, 0 s old, names no process yet\)/,
    );
    const at = new Date(Date.now() - 31_000);
    utimesSync(join(dir, "empty.lock"), at, at);
    const release = await acquireLock(dir, "empty.lock");
    expect(JSON.parse(readFileSync(join(dir, "empty.lock"), "utf8")).pid).toBe(process.pid);
    await release();
  });

  it("removes the claims that processes killed while taking over a stale lock left", async () => {
    const claim = join(dir, "claimed.lock.break-0123456789abcdef");
    writeFileSync(claim, JSON.stringify({ pid: 1, host: "node-elsewhere", started: "2026-01-01T00:00:00.000Z" }));
    const release = await acquireLock(dir, "claimed.lock");
    expect(existsSync(claim)).toBe(false);
    await release();
  });

  // Four processes start acquireLock at the same moment on one folder, trial after trial: a free folder, one holding
  // a lock whose process on this host is gone (as kill -9 leaves it), one holding a torn lock, and one holding a
  // lock another host stopped touching. Each holder logs when it holds the lock and when it lets go.
  it("never lets two processes hold the lock at once, racing for a free folder or a stale lock", async () => {
    const race = join(dir, "race");
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    const old = new Date(Date.now() - 11 * 60_000);
    const stale: Record<string, ((path: string) => void) | undefined> = {
      free: undefined,
      dead: (p) => writeFileSync(p, JSON.stringify({ pid: dead, host: hostname(), started: "x" }) + "\n"),
      torn: (p) => (writeFileSync(p, '{"pid": '), utimesSync(p, old, old)),
      foreign: (p) => (
        writeFileSync(p, JSON.stringify({ pid: 1, host: "node-elsewhere", started: "x" })),
        utimesSync(p, old, old)
      ),
    };
    const trials = Object.keys(stale).flatMap((kind) => Array.from({ length: 4 }, (_, i) => `${kind}-${i}`));
    for (const t of trials) {
      mkdirSync(join(race, t), { recursive: true });
      stale[t.split("-")[0]!]?.(join(race, t, ".hsm.lock"));
      writeFileSync(join(race, t, "log"), "");
    }
    const child = join(dir, "race-child.mjs");
    writeFileSync(
      child,
      `import { appendFileSync } from "node:fs";
import { acquireLock } from ${JSON.stringify(pathToFileURL(join(import.meta.dirname, "..", "..", "dist", "store", "lock.js")).href)};
const [race, start, ...trials] = process.argv.slice(2);
for (const [i, t] of trials.entries()) {
  const at = Number(start) + i * 400;
  await new Promise((r) => setTimeout(r, Math.max(0, at - 30 - Date.now())));
  while (Date.now() < at) {} // all four at once
  const log = race + "/" + t + "/log";
  try {
    const release = await acquireLock(race + "/" + t);
    appendFileSync(log, "in\\n");
    await new Promise((r) => setTimeout(r, 150));
    appendFileSync(log, "out\\n");
    await release();
  } catch (err) {
    appendFileSync(log, "refused: " + err.message.split(" (")[0] + "\\n");
  }
}
`,
    );
    const start = String(Date.now() + 1500);
    const children = await Promise.all(
      Array.from({ length: 4 }, () => runChild(process.execPath, [child, race, start, ...trials])),
    );
    for (const c of children) expect(c.stderr).toBe("");
    for (const t of trials) {
      const log = readFileSync(join(race, t, "log"), "utf8")
        .trim()
        .split("\n");
      const most = mostHolders(log);
      expect(most, `${t}: ${log.join(", ")}`).toBe(1);
      for (const line of log.filter((l) => l.startsWith("refused")))
        expect(line, t).toBe(`refused: ${join(race, t)}: is being written by another hsm process`);
    }
  });
});

describe("acquireLock between hosts whose processes share a pid", () => {
  // Containers sharing a folder each run hsm under the same pid (often 1, in a PID namespace of its own): two such
  // processes, their hosts told apart by name, take one lock at the same moment, trial after trial, each logging
  // when it holds the lock and when it lets go.
  it("gives one the lock and tells the other who holds it", async () => {
    const race = join(dir, "same-pid");
    mkdirSync(race, { recursive: true });
    const child = join(dir, "same-pid-child.mjs");
    writeFileSync(
      child,
      `import { appendFileSync } from "node:fs";
import { acquireLock } from ${JSON.stringify(pathToFileURL(join(import.meta.dirname, "..", "..", "dist", "store", "lock.js")).href)};
const start = Number(process.argv[2]);
for (let i = 0; i < 20; i++) {
  const at = start + i * 200;
  await new Promise((r) => setTimeout(r, Math.max(0, at - 30 - Date.now())));
  while (Date.now() < at) {} // both at once
  const log = ${JSON.stringify(race)} + "/" + i + ".log";
  try {
    const release = await acquireLock(${JSON.stringify(race)}, i + ".lock");
    appendFileSync(log, "in\\n");
    await new Promise((r) => setTimeout(r, 50));
    appendFileSync(log, "out\\n");
    await release();
  } catch (err) {
    appendFileSync(log, err.message.split(" (")[0] + "\\n");
  }
}
`,
    );
    const start = String(Date.now() + 1500);
    const as = (host: string) =>
      `data:text/javascript,import os from "node:os"; import { syncBuiltinESMExports } from "node:module"; ` +
      `os.hostname = () => "${host}"; syncBuiltinESMExports(); Object.defineProperty(process, "pid", { value: 4242 });`;
    const children = await Promise.all(
      ["node-a", "node-b"].map((host) => runChild(process.execPath, ["--import", as(host), child, start])),
    );
    for (const c of children) expect(c.stderr).toBe("");
    for (let i = 0; i < 20; i++) {
      const log = readFileSync(join(race, `${i}.log`), "utf8")
        .trim()
        .split("\n");
      const most = mostHolders(log);
      expect(most, log.join(", ")).toBe(1);
      for (const line of log.filter((l) => l !== "in" && l !== "out"))
        expect(line).toBe(`${race}: is being written by another hsm process`);
    }
  });
});
