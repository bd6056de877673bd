/**
 * Vitest global setup: compiles src/ into a fresh dist/ once per test run, so
 * that the tests that run bin/hsm.js or import "hsm" by name exercise this
 * checkout's sources, never a stale build. The build is made beside dist/ and
 * swapped in whole, so no file of an older build survives it.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, renameSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");

function removeLeftovers(): void {
  for (const name of readdirSync(root)) {
    if (/^\.dist-(next|old)-\d+$/.test(name)) rmSync(join(root, name), { recursive: true, force: true });
  }
}

export default function setup(): void {
  removeLeftovers();
  const next = join(root, `.dist-next-${process.pid}`);
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  try {
    execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json"), "--outDir", next], {
      cwd: root,
      encoding: "utf8",
      stdio: "pipe",
    });
  } catch (err) {
    rmSync(next, { recursive: true, force: true });
    const e = err as { stdout?: string; stderr?: string };
    throw new Error(`the tests run against a build of src/, and tsc failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
  const dist = join(root, "dist");
  const old = join(root, `.dist-old-${process.pid}`);
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(next, dist);
  rmSync(old, { recursive: true, force: true });
}
