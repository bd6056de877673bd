/**
 * The formats and definitions live in docs/, and code, tests and docs cite
 * them as `docs/<page>.md#<anchor>`. Every such citation must land on a
 * heading that exists, so a reader who follows one finds the text it names;
 * and every file of the repository that code, tests and docs name by its path
 * (`src/store/npy.ts`) must be there, so that a comment does not send a reader
 * to a file that moved.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

import { describe, expect, it } from "vitest";

import { filesUnder } from "../helpers/files.js";

const ROOT = join(import.meta.dirname, "..", "..");

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** The anchors of a Markdown page's headings (outside code blocks). */
function anchorsOf(markdown: string): Set<string> {
  const prose = markdown.replace(/^```[\s\S]*?^```/gm, "");
  return new Set([...prose.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => anchorOf(m[1]!)));
}

/** Every `docs/<page>.md#<anchor>` a text cites, and `<page>.md#<anchor>` links between docs pages. */
function citations(text: string, fromDocs: boolean): { page: string; anchor: string }[] {
  const re = fromDocs ? /(?:docs\/|\(|\]\()([\w-]+\.md)#([\w-]+)/g : /docs\/([\w-]+\.md)#([\w-]+)/g;
  return [...text.matchAll(re)].map((m) => ({ page: m[1]!, anchor: m[2]! }));
}

/** Every repository path a text names: `src/…`, `test/…`, `scripts/…`, `native/…`, `docs/…`, with a file ending. */
function pathsNamed(text: string): string[] {
  const re = /(?<![\w./-])((?:src|test|scripts|native|docs)\/[\w./-]*\.(?:ts|mjs|js|md|cc|h|py|json|sh|gyp))\b/g;
  return [...text.matchAll(re)].map((m) => m[1]!);
}

/**
 * The files docs/contributing.md's walks add (a ```ts block whose first line is
 * `// <path>`, as test/helpers/walks.ts runs them) and their test files: named,
 * on purpose, before they exist.
 */
function walkFiles(): Set<string> {
  const guide = readFileSync(join(ROOT, "docs", "contributing.md"), "utf8");
  const files = [...guide.matchAll(/^```ts\n\/\/ (\S+\.ts)\n/gm)].map((m) => m[1]!);
  return new Set(files.flatMap((f) => [f, f.replace(/^src\/(.*)\.ts$/, "test/$1.test.ts")]));
}

describe("links into docs/", () => {
  it("computes anchors as GitHub does", () => {
    expect(anchorOf("Generation fields")).toBe("generation-fields");
    expect(anchorOf("ISS: definition")).toBe("iss-definition");
    expect(anchorOf("Stores written by other tools")).toBe("stores-written-by-other-tools");
    expect(anchorOf("`index.json` keys")).toBe("indexjson-keys");
  });

  it("every docs/<page>.md#<anchor> in src/, test/, docs/ and the README names a heading that exists", () => {
    const pages = new Map(
      filesUnder(join(ROOT, "docs"), /\.md$/).map((f) => [
        relative(join(ROOT, "docs"), f),
        anchorsOf(readFileSync(f, "utf8")),
      ]),
    );
    const sources = [
      ...filesUnder(join(ROOT, "src"), /\.ts$/),
      ...filesUnder(join(ROOT, "test"), /\.ts$/).filter((f) => !f.endsWith("doc-links.test.ts")),
      ...filesUnder(join(ROOT, "docs"), /\.md$/),
      join(ROOT, "README.md"),
    ];
    const broken: string[] = [];
    let seen = 0;
    for (const file of sources) {
      for (const { page, anchor } of citations(readFileSync(file, "utf8"), file.endsWith(".md"))) {
        seen++;
        if (!pages.get(page)?.has(anchor)) broken.push(`${relative(ROOT, file)} cites ${page}#${anchor}`);
      }
    }
    expect(seen).toBeGreaterThan(20);
    expect(broken).toEqual([]);
  });

  it("finds the paths a text names, not parts of longer ones", () => {
    const text = "see src/store/npy.ts, `test/helpers/tmp.ts` and (native/cpu.h); not ../src/x.ts or foo/src/y.ts";
    expect(pathsNamed(text)).toEqual(["src/store/npy.ts", "test/helpers/tmp.ts", "native/cpu.h"]);
  });

  it("every repository path named in src/, test/, scripts/, native/, docs/ and the README exists", () => {
    const sources = [
      ...filesUnder(join(ROOT, "src"), /\.ts$/),
      ...filesUnder(join(ROOT, "test"), /\.(ts|py)$/).filter((f) => !f.endsWith("doc-links.test.ts")),
      ...filesUnder(join(ROOT, "scripts"), /\.(mjs|py|sh)$/),
      ...filesUnder(join(ROOT, "native"), /\.(cc|h)$/),
      ...filesUnder(join(ROOT, "docs"), /\.md$/),
      join(ROOT, "README.md"),
    ];
    const walks = walkFiles();
    const missing: string[] = [];
    for (const file of sources) {
      for (const path of pathsNamed(readFileSync(file, "utf8"))) {
        if (!walks.has(path) && !existsSync(join(ROOT, path))) missing.push(`${relative(ROOT, file)} names ${path}`);
      }
    }
    expect(walks.size).toBeGreaterThan(4);
    expect([...new Set(missing)]).toEqual([]);
  });
});
