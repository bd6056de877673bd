/**
 * package.json's dependencies are what the installed package runs: every
 * package that src/ or bin/ names is a dependency (or an optional one), since
 * `npm install hsm` leaves the development dependencies out, and every
 * dependency is named there, so that users do not install what only the tests
 * read. package-lock.json's root entry lists the same, as `npm ci` requires.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { filesUnder } from "../helpers/files.js";

const ROOT = join(import.meta.dirname, "..", "..");

interface Manifest {
  dependencies: Record<string, string>;
  optionalDependencies: Record<string, string>;
  devDependencies: Record<string, string>;
}

const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as Manifest;
const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, Partial<Manifest> & { dev?: boolean }>;
};

/** Development dependencies whose names src/ quotes for another reason: `typescript` is a kernel backend's name. */
const OTHER_MEANING = new Set(["typescript"]);

const shipped = [...filesUnder(join(ROOT, "src"), /\.ts$/), ...filesUnder(join(ROOT, "bin"), /\.js$/)].map((f) =>
  readFileSync(f, "utf8"),
);

/** Whether a shipped file quotes the package's name, alone or with a path inside it ("pkg/sub"). */
const named = (name: string): boolean => {
  const re = new RegExp(`["'\`]${name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}(/[^"'\`]*)?["'\`]`);
  return shipped.some((text) => re.test(text));
};

describe("package.json's dependencies", () => {
  it("every development dependency is one src/ and bin/ do not name", () => {
    const needed = Object.keys(pkg.devDependencies).filter((d) => !OTHER_MEANING.has(d) && named(d));
    expect(needed).toEqual([]);
  });

  it("every dependency is one src/ or bin/ names", () => {
    const unused = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.optionalDependencies)].filter(
      (d) => !named(d),
    );
    expect(unused).toEqual([]);
  });

  it("package-lock.json's root entry and its flags agree with package.json", () => {
    const root = lock.packages[""]!;
    expect(root.dependencies).toEqual(pkg.dependencies);
    expect(root.optionalDependencies).toEqual(pkg.optionalDependencies);
    expect(root.devDependencies).toEqual(pkg.devDependencies);
    for (const d of Object.keys(pkg.dependencies)) expect(lock.packages[`node_modules/${d}`]?.dev, d).toBeUndefined();
  });
});
