/**
 * The walk-throughs of docs/contributing.md, run as written. A walk's new file
 * is a ```ts block whose first line names it (`// src/metrics/norm.ts`); a
 * test loads that block as the module it would be at that path — its relative
 * imports pointed at the real sources — and puts it through the registry the
 * walk extends. A walk that stops working fails its test; a test cannot drift
 * from the text, since the text is what it runs.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { tempDir } from "./tmp.js";

const ROOT = join(import.meta.dirname, "..", "..");
const GUIDE = join(ROOT, "docs", "contributing.md");

/** The ```ts blocks of docs/contributing.md that start with `// <path>`, by that path. */
function walkFiles(): Map<string, string> {
  const text = readFileSync(GUIDE, "utf8");
  const files = new Map<string, string>();
  for (const m of text.matchAll(/^```ts\n\/\/ (\S+\.ts)\n([\s\S]*?)^```$/gm)) files.set(m[1]!, m[2]!);
  return files;
}

/** The block of docs/contributing.md that is the new file `path`, its relative imports made absolute. */
function walkSource(path: string): string {
  const code = walkFiles().get(path);
  if (code === undefined) throw new Error(`docs/contributing.md has no \`\`\`ts block starting with "// ${path}"`);
  const at = dirname(join(ROOT, path));
  return code.replace(
    /(from\s*|import\s*\(\s*)(["'])(\.{1,2}\/[^"']+)\2/g,
    (_m, lead: string, q: string, spec: string) => {
      const target = resolve(at, spec).replace(/\.js$/, ".ts");
      return `${lead}${q}${pathToFileURL(target).href}${q}`;
    },
  );
}

/** Imports the walk's file `path` as written in docs/contributing.md. */
export async function importWalk<T>(path: string): Promise<T> {
  const file = join(tempDir("hsm-walk-"), path.replace(/[\\/]/g, "_"));
  writeFileSync(file, walkSource(path));
  return (await import(pathToFileURL(file).href)) as T;
}
