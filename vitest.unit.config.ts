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

const HEAVY = /^(node:)?child_process$|^onnxruntime-node$|^playwright-core$|^hsm$|\/dist\//;
const IMPORT = /^\s*(import|export)\s+(?!type\b)[^;]*?from\s+["']([^"']+)["']|^\s*import\s+["']([^"']+)["']/gm;

/** A file's static imports: whether one is heavy itself, and the files of the tree it imports. */
function importsOf(file: string): { heavy: boolean; files: string[] } {
  let heavy = false;
  const files: string[] = [];
  for (const m of readFileSync(file, "utf8").matchAll(IMPORT)) {
    const spec = m[2] ?? m[3]!;
    if (HEAVY.test(spec)) heavy = true;
    else if (spec.startsWith(".")) {
      const target = resolve(dirname(file), spec).replace(/\.js$/, ".ts");
      if (existsSync(target)) files.push(target);
    }
  }
  return { heavy, files };
}

/**
 * The test files under `root`/test/ that, through their static imports, however deep, load nothing heavy, relative
 * to `root`. Each test file's imports are followed on their own, so that an import cycle cannot hide what lies
 * beyond it.
 */
export function unitTestFiles(root: string): string[] {
  const parsed = new Map<string, { heavy: boolean; files: string[] }>();
  const heavy = (file: string): boolean => {
    const reached = new Set([file]);
    for (const f of reached) {
      let imports = parsed.get(f);
      if (imports === undefined) parsed.set(f, (imports = importsOf(f)));
      if (imports.heavy) return true;
      for (const next of imports.files) reached.add(next);
    }
    return false;
  };
  return readdirSync(join(root, "test"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".test.ts"))
    .map((f) => join(root, "test", f))
    .filter((f) => !heavy(f))
    .map((f) => relative(root, f))
    .sort();
}

export default defineConfig({
  test: {
    include: unitTestFiles(import.meta.dirname),
    pool: "forks",
    // These files only compute; one fork per core, where vitest would leave one core to itself.
    poolOptions: { forks: { maxForks: Math.max(availableParallelism(), 1) } },
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
