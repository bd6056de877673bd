/**
 * The import graph points one way: lower layers never import upper ones. Every
 * import of every src file — static (`import … from`, `export … from`, bare
 * `import "…"`) and dynamic (`import("…")`) — is read and checked against the
 * rules below; a violation names the file and the import.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

import { describe, expect, it } from "vitest";

const SRC = join(import.meta.dirname, "..", "..", "src");

/** For each top-level folder of src/, the folders it must not import from. */
const FORBIDDEN: Record<string, string[]> = {
  kernels: ["store", "metrics", "runner", "bank", "score", "export", "pipeline", "cli"],
  native: ["store", "metrics", "runner", "bank", "score", "export", "pipeline", "cli"],
  store: ["runner", "metrics", "export", "pipeline", "cli"],
  bank: ["runner", "metrics", "export", "pipeline", "cli"],
  score: ["runner", "metrics", "export", "pipeline", "cli"],
  runner: ["export", "pipeline", "cli"],
  metrics: ["export", "pipeline", "cli"],
  pipeline: ["cli"],
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.(ts|mts|js|mjs)$/.test(e.name) && !e.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** Every module specifier a file imports, statically or dynamically (comments skipped). */
function importsOf(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
  const specs: string[] = [];
  const patterns = [
    /\bimport\s+(?:type\s+)?[\w*{}\s,$]*?\s*from\s*["']([^"']+)["']/g,
    /\bexport\s+(?:type\s+)?(?:\*(?:\s+as\s+\w+)?|\{[^}]*\})\s*from\s*["']([^"']+)["']/g,
    /\bimport\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["'`]([^"'`]+)["'`]/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) specs.push(m[1]!);
  return specs;
}

/** The top-level src folder a relative specifier from `file` lands in (undefined for packages and src/*.ts). */
function layerOf(file: string, spec: string): string | undefined {
  if (!spec.startsWith(".")) return undefined;
  const target = relative(SRC, resolve(dirname(file), spec));
  const parts = target.split(/[\\/]/);
  return parts.length > 1 ? parts[0] : undefined;
}

describe("import direction", () => {
  it("reads static, re-export, bare and dynamic imports", () => {
    const text = `import { a } from "../store/x.js";\nimport type { B } from '../metrics/y.js';\nexport { c } from "../cli/z.js";\nexport * from "../runner/w.js";\nimport "../bank/side.js";\nconst m = await import("../pipeline/run.js");\n// import { no } from "../export/comment.js";\n/* import("../score/block.js") */`;
    expect(importsOf(text).sort()).toEqual(["../bank/side.js", "../cli/z.js", "../metrics/y.js", "../pipeline/run.js", "../runner/w.js", "../store/x.js"]);
  });

  it("no lower layer imports an upper one", () => {
    const violations: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const layer = relative(SRC, file).split(/[\\/]/)[0]!;
      const forbidden = FORBIDDEN[layer];
      if (!forbidden) continue;
      for (const spec of importsOf(readFileSync(file, "utf8"))) {
        const target = layerOf(file, spec);
        if (target && forbidden.includes(target)) violations.push(`${relative(SRC, file)} imports "${spec}" (${layer}/ must not import from ${target}/)`);
      }
    }
    expect(violations).toEqual([]);
  });
});
