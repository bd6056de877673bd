/**
 * The walk-throughs of docs/contributing.md, run as written. A walk's new file
 * is a ```ts block whose first line names it (`// src/metrics/norm.ts`); a
 * test loads that block as the module it would be at that path — its relative
 * imports pointed at the real sources — and puts it through the registry the
 * walk extends. A walk that stops working fails its test; a test cannot drift
 * from the text, since the text is what it runs. A walk's addition to a Python
 * file is a ```python block whose first line names the file
 * (`# test/helpers/torch_export.py`): a test runs a copy of that file with the
 * block added before its commands.
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

/**
 * A copy of the Python file `path` with docs/contributing.md's ```python block that starts with `# <path>` added
 * before the file's commands (its `if __name__ == "__main__":`); returns the copy's path.
 */
export function walkScript(path: string): string {
  const text = readFileSync(GUIDE, "utf8");
  const block = [...text.matchAll(/^```python\n# (\S+\.py)\n([\s\S]*?)^```$/gm)].find((m) => m[1] === path)?.[2];
  if (block === undefined) throw new Error(`docs/contributing.md has no \`\`\`python block starting with "# ${path}"`);
  const source = readFileSync(join(ROOT, path), "utf8");
  const main = source.lastIndexOf('\nif __name__ == "__main__":');
  if (main < 0) throw new Error(`${path} has no if __name__ == "__main__": to add the walk's block before`);
  const file = join(tempDir("hsm-walk-"), path.replace(/^.*[\\/]/, ""));
  writeFileSync(file, `${source.slice(0, main)}\n\n${block}${source.slice(main)}`);
  return file;
}
