/**
 * The shape of src/cli/: every function short (a command declares options,
 * calls one library function and prints), and nothing imported but the public
 * API (src/index.ts), errors, defaults, the version, commander and Node itself.
 * One exception, named below: `hsm verify` loads its pipeline module directly.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

import { Command } from "commander";
import ts from "typescript";
import { describe, expect, it } from "vitest";

import { COMMANDS } from "../../src/cli/commands/index.js";

const SRC = join(import.meta.dirname, "..", "..", "src");
const CLI = join(SRC, "cli");
const MAX_LINES = 40;
const ALLOWED = new Set(["index.ts", "errors.ts", "defaults.ts", "version.ts"].map((f) => join(SRC, f)));
/**
 * Imports past the public API, file by file, each with its reason. `hsm verify`'s start-up is part of the time it
 * reports against `sha256sum`, and the library's entry point loads some twenty modules it never uses; its command
 * imports the verify pipeline (itself behind `verifyStoreFolder` in the API) when it runs.
 */
const EXCEPTIONS = new Map([[join(CLI, "commands", "verify.ts"), new Set([join(SRC, "pipeline", "verify.ts")])]]);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => join(e.parentPath, e.name));
}

function parse(file: string, text: string): ts.SourceFile {
  return ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
}

function walk(node: ts.Node, visit: (n: ts.Node) => void): void {
  visit(node);
  node.forEachChild((child) => walk(child, visit));
}

/** Every function (declaration, expression, arrow, method, accessor) whose body spans more than `max` lines, as `file:line name (n lines)`. */
function longFunctions(file: string, text: string, max: number): string[] {
  const sf = parse(file, text);
  const found: string[] = [];
  walk(sf, (n) => {
    if (!ts.isFunctionLike(n) || !("body" in n) || !n.body) return;
    const body = n.body as ts.Node;
    const first = sf.getLineAndCharacterOfPosition(body.getStart(sf)).line;
    const last = sf.getLineAndCharacterOfPosition(body.getEnd()).line;
    const lines = last - first + 1;
    const name = n.name && ts.isIdentifier(n.name) ? n.name.text : "(anonymous)";
    if (lines > max) found.push(`${relative(SRC, file)}:${first + 1} ${name} (${lines} lines)`);
  });
  return found;
}

/** Every module specifier: static imports and re-exports, `import()` and `require()`. */
function specifiers(file: string, text: string): string[] {
  const out: string[] = [];
  walk(parse(file, text), (n) => {
    if (
      (ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) &&
      n.moduleSpecifier &&
      ts.isStringLiteral(n.moduleSpecifier)
    )
      out.push(n.moduleSpecifier.text);
    const dynamic =
      ts.isCallExpression(n) &&
      (n.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(n.expression) && n.expression.text === "require"));
    if (dynamic) out.push(n.arguments[0] && ts.isStringLiteral(n.arguments[0]) ? n.arguments[0].text : "<computed>");
  });
  return out;
}

/** The imports of a src/cli/ file that reach past the public API, as `file: specifier`. */
function forbiddenImports(file: string, text: string): string[] {
  return specifiers(file, text)
    .filter((spec) => {
      if (spec === "commander" || spec.startsWith("node:")) return false;
      if (!spec.startsWith(".")) return true;
      const target = resolve(dirname(file), spec).replace(/\.js$/, ".ts");
      return !(ALLOWED.has(target) || target.startsWith(CLI + "/") || EXCEPTIONS.get(file)?.has(target));
    })
    .map((spec) => `${relative(SRC, file)}: ${spec}`);
}

describe("src/cli", () => {
  const files = sourceFiles(CLI);

  it("has one file per command, named for the command it registers", () => {
    const program = new Command("hsm");
    for (const add of COMMANDS) add(program, { metrics: [], exportFormats: [] });
    const names = program.commands.map((c) => c.name());
    expect(names.length).toBe(COMMANDS.length);
    expect(new Set(readdirSync(join(CLI, "commands")))).toEqual(new Set([...names.map((c) => `${c}.ts`), "index.ts"]));
  });

  it(`holds no function over ${MAX_LINES} lines`, () => {
    expect(files.length).toBeGreaterThan(14);
    expect(files.flatMap((f) => longFunctions(f, readFileSync(f, "utf8"), MAX_LINES))).toEqual([]);
  });

  it("imports only the public API, errors, defaults, the version, commander and node:", () => {
    expect(files.flatMap((f) => forbiddenImports(f, readFileSync(f, "utf8")))).toEqual([]);
  });

  it("the length rule catches a function one line too long, of every kind", () => {
    const body = (n: number) => Array.from({ length: n - 2 }, (_, i) => `  x += ${i};`).join("\n");
    const file = join(CLI, "probe.ts");
    expect(longFunctions(file, `function ok() {\n${body(40)}\n}`, MAX_LINES)).toEqual([]);
    expect(longFunctions(file, `function tooLong() {\n${body(41)}\n}`, MAX_LINES)).toEqual([
      "cli/probe.ts:1 tooLong (41 lines)",
    ]);
    expect(longFunctions(file, `const f = async () => {\n${body(41)}\n};`, MAX_LINES)).toEqual([
      "cli/probe.ts:1 (anonymous) (41 lines)",
    ]);
    expect(longFunctions(file, `x.action(function () {\n${body(41)}\n});`, MAX_LINES)).toHaveLength(1);
    expect(longFunctions(file, `class A {\n  m() {\n${body(41)}\n  }\n}`, MAX_LINES)).toEqual([
      "cli/probe.ts:2 m (41 lines)",
    ]);
  });

  it("the import rule catches a reach past the API, static or dynamic", () => {
    const file = join(CLI, "commands", "probe.ts");
    const ok = `import { extract } from "../../index.js";\nimport { out } from "../print.js";\nimport { Command } from "commander";\nimport { join } from "node:path";`;
    expect(forbiddenImports(file, ok)).toEqual([]);
    expect(forbiddenImports(file, `import type { Manifest } from "../../store/manifest.js";`)).toEqual([
      "cli/commands/probe.ts: ../../store/manifest.js",
    ]);
    expect(forbiddenImports(file, `const m = await import("../../extract/extract.js");`)).toEqual([
      "cli/commands/probe.ts: ../../extract/extract.js",
    ]);
    expect(forbiddenImports(file, `export { x } from "../../metrics/report.js";`)).toHaveLength(1);
    expect(forbiddenImports(file, `import ort from "onnxruntime-node";`)).toEqual([
      "cli/commands/probe.ts: onnxruntime-node",
    ]);
  });
});
