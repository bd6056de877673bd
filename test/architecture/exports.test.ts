/**
 * Every value a file of src/ or test/helpers/, or test/tolerances.ts, exports
 * (a function, class, constant or enum) is named by some other file of src/,
 * test/ or scripts/, outside comments: an export nothing imports is either
 * dead code or a helper that should not be public (or a tolerance no test
 * holds to), and a successor cannot tell which. Types are left out, since
 * exported signatures name them.
 */
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";

import { describe, expect, it } from "vitest";

import { filesUnder } from "../helpers/files.js";

const ROOT = join(import.meta.dirname, "..", "..");

const withoutComments = (text: string): string =>
  text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");

/** The names of the values a module exports by declaration. */
function valueExports(text: string): string[] {
  const re = /^export\s+(?:declare\s+)?(?:async\s+)?(?:abstract\s+)?(?:function\*?|class|const|let|enum)\s+([\w$]+)/gm;
  return [...text.matchAll(re)].map((m) => m[1]!);
}

describe("exports", () => {
  it("finds the values a module exports, not its types or private names", () => {
    const text =
      "export function a() {}\nexport const b = 1;\nexport class C {}\nexport interface D {}\nconst e = 2;\n";
    expect(valueExports(text)).toEqual(["a", "b", "C"]);
  });

  it("every value exported by src/, test/helpers/ and the tolerances is used by another file", () => {
    const exporters = [
      ...filesUnder(join(ROOT, "src"), /\.ts$/),
      ...filesUnder(join(ROOT, "test", "helpers"), /\.ts$/),
      join(ROOT, "test", "tolerances.ts"),
    ];
    const users = [
      ...filesUnder(join(ROOT, "src"), /\.ts$/),
      ...filesUnder(join(ROOT, "test"), /\.ts$/).filter((f) => !f.endsWith("exports.test.ts")),
      ...filesUnder(join(ROOT, "scripts"), /\.m?js$/),
      ...filesUnder(join(ROOT, "bin"), /\.js$/),
    ].map((f) => ({ file: f, code: withoutComments(readFileSync(f, "utf8")) }));
    const unused: string[] = [];
    for (const file of exporters) {
      for (const name of valueExports(readFileSync(file, "utf8"))) {
        const word = new RegExp(`\\b${name.replace(/\$/g, "\\$")}\\b`);
        if (!users.some((u) => u.file !== file && word.test(u.code))) unused.push(`${relative(ROOT, file)}: ${name}`);
      }
    }
    expect(unused.sort()).toEqual([]);
  });
});
