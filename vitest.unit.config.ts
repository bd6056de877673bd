/**
 * The unit subset (`npm run test:unit`), for the edit loop: every test file that,
 * through its static imports (its own, test/helpers/ and src/, followed file by
 * file), loads none of what makes a test slow or needs a build — a child process
 * (node:child_process: the CLI, Python), onnxruntime-node, a browser
 * (playwright-core) or the compiled dist/ ("hsm"). Which files qualify is worked
 * out here on every run, so a new test file lands on the right side by itself.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, relative, resolve } from "node:path";

import { defineConfig } from "vitest/config";

const root = import.meta.dirname;
const HEAVY = /^(node:)?child_process$|^onnxruntime-node$|^playwright-core$|^hsm$|\/dist\//;
const IMPORT = /^\s*(import|export)\s+(?!type\b)[^;]*?from\s+["']([^"']+)["']|^\s*import\s+["']([^"']+)["']/gm;

const verdicts = new Map<string, boolean>();

/** Whether `file` or anything it imports statically, however deep, is heavy. */
function heavy(file: string): boolean {
  const known = verdicts.get(file);
  if (known !== undefined) return known;
  verdicts.set(file, false); // an import cycle adds nothing new
  let found = false;
  for (const m of readFileSync(file, "utf8").matchAll(IMPORT)) {
    const spec = m[2] ?? m[3]!;
    if (HEAVY.test(spec)) found = true;
    else if (spec.startsWith(".")) {
      const target = resolve(dirname(file), spec).replace(/\.js$/, ".ts");
      found = existsSync(target) && heavy(target);
    }
    if (found) break;
  }
  verdicts.set(file, found);
  return found;
}

const unit = readdirSync(join(root, "test"), { recursive: true, encoding: "utf8" })
  .filter((f) => f.endsWith(".test.ts"))
  .map((f) => join(root, "test", f))
  .filter((f) => !heavy(f))
  .map((f) => relative(root, f))
  .sort();

export default defineConfig({
  test: {
    include: unit,
    pool: "forks",
    // These files only compute; one fork per core, where vitest would leave one core to itself.
    poolOptions: { forks: { maxForks: Math.max(availableParallelism(), 1) } },
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
