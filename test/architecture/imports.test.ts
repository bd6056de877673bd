/**
 * The import graph points one way. Every folder of src/ has a place in one
 * total order, lowest first; a file may import from its own folder and from
 * folders below its own, never from one above. Every import of every src file —
 * static (`import … from`, `export … from`, bare `import "…"`), type-only and
 * dynamic (`import("…")`) — is read and checked; a violation names the file and
 * the import. No two files import each other, directly or around a loop.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

import { describe, expect, it } from "vitest";

const SRC = join(import.meta.dirname, "..", "..", "src");

/**
 * The folders of src/, lowest first: the toolkits (files, kernels, ONNX), then
 * bank → store → scoring → model → synthetic models → metrics → extract and
 * generate → export, and the orchestration (study files, report, pipeline, CLI)
 * on top. The top-level files (errors.ts, defaults.ts,
 * version.ts) are below every folder; index.ts, the public API, is above all
 * but cli/.
 */
const ORDER = [
  "util", // files, JSONL, progress, random numbers, charts, waiting on many calls
  "kernels", // the numeric kernels: TypeScript twins, the native core, TensorFlow.js
  "onnx", // the ONNX graph toolkit: reading, surgery, KV-cache plumbing
  "bank", // the question bank and the benchmark's prompts
  "store", // the hidden-state store: .npy, manifest, writer, reader, verify
  "score", // scoring generations
  "model", // model folders: files, tokenizer, session, graph styles, feeds, batching
  "synthetic", // synthetic models and stores for tests, benchmarks and the demo
  "metrics", // ISS, KTS and the metric registry
  "extract", // hidden-state extraction
  "generate", // greedy generation: orchestration, decoding rules, workers, LM head
  "export", // Every Eval Ever and Foundry exports
  "study", // study files, output layout, paired statistics
  "report", // the HTML report and model comparisons
  "pipeline", // whole runs: run, demo, study
  "cli", // argument parsing only
] as const;

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

/** The src folder a file or a resolved import lands in; "" for src/*.ts, undefined outside src/. */
function folderOf(path: string): string | undefined {
  const parts = relative(SRC, path).split(/[\\/]/);
  if (parts[0] === "..") return undefined;
  return parts.length > 1 ? parts[0] : "";
}

/** The rank of a place: top-level files below everything, index.ts just below cli/. */
function rankOf(path: string): number {
  const folder = folderOf(path)!;
  if (folder !== "") return ORDER.indexOf(folder as (typeof ORDER)[number]);
  return relative(SRC, path) === "index.ts" ? ORDER.indexOf("cli") - 0.5 : -1;
}

/** The src file a relative specifier from `file` names (undefined for packages). */
function targetOf(file: string, spec: string): string | undefined {
  if (!spec.startsWith(".")) return undefined;
  return resolve(dirname(file), spec).replace(/\.js$/, ".ts");
}

describe("import direction", () => {
  it("reads static, re-export, bare and dynamic imports", () => {
    const text = `import { a } from "../store/x.js";\nimport type { B } from '../metrics/y.js';\nexport { c } from "../cli/z.js";\nexport * from "../model/w.js";\nimport "../bank/side.js";\nconst m = await import("../pipeline/run.js");\n// import { no } from "../export/comment.js";\n/* import("../score/block.js") */`;
    expect(importsOf(text).sort()).toEqual([
      "../bank/side.js",
      "../cli/z.js",
      "../metrics/y.js",
      "../model/w.js",
      "../pipeline/run.js",
      "../store/x.js",
    ]);
  });

  it("names every folder of src/ in the order", () => {
    const folders = readdirSync(SRC, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
    expect(folders.filter((f) => !(ORDER as readonly string[]).includes(f))).toEqual([]);
    expect(ORDER.filter((f) => !folders.includes(f))).toEqual([]);
  });

  it("no file imports from a folder above its own", () => {
    const violations: string[] = [];
    for (const file of sourceFiles(SRC)) {
      for (const spec of importsOf(readFileSync(file, "utf8"))) {
        const target = targetOf(file, spec);
        if (!target || folderOf(target) === undefined || folderOf(target) === folderOf(file)) continue;
        if (rankOf(target) > rankOf(file))
          violations.push(
            `${relative(SRC, file)} imports "${spec}" (${folderOf(file) || "src/"} is below ${folderOf(target) || relative(SRC, target)})`,
          );
      }
    }
    expect(violations).toEqual([]);
  });

  it("no import cycle between files, value or type", () => {
    const graph = new Map<string, string[]>();
    for (const file of sourceFiles(SRC)) {
      const targets = importsOf(readFileSync(file, "utf8")).map((spec) => targetOf(file, spec));
      graph.set(
        file,
        targets.filter((t): t is string => t !== undefined),
      );
    }
    expect(cycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(" → "))).toEqual([]);
  });

  it("finds a cycle when there is one", () => {
    const g = new Map([
      ["a", ["b"]],
      ["b", ["c"]],
      ["c", ["a"]],
      ["d", ["a"]],
    ]);
    expect(cycles(g)).toEqual([["a", "b", "c", "a"]]);
    expect(
      cycles(
        new Map([
          ["a", ["b"]],
          ["b", []],
        ]),
      ),
    ).toEqual([]);
  });
});

/** One cycle through each strongly connected group of files (depth-first, in the graph's order). */
function cycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const state = new Map<string, "open" | "done">();
  const found: string[][] = [];
  const path: string[] = [];
  const visit = (node: string): void => {
    state.set(node, "open");
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue;
      if (state.get(next) === "open") found.push([...path.slice(path.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(node, "done");
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node);
  return found;
}
