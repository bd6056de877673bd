/**
 * `npm run test:unit` takes the test files that load nothing heavy through
 * their static imports, however deep (vitest.unit.config.ts). An import cycle
 * must not hide what lies beyond it: a file first met inside a cycle, before
 * the cycle's heavy import was read, was once taken as light for good.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { unitTestFiles } from "../../vitest.unit.config.js";
import { tempDir } from "../helpers/tmp.js";

/** Writes `files` (path under test/ → text) into the test/ folder of a new root; returns the root. */
function tree(files: Record<string, string>): string {
  const root = tempDir("hsm-unit-subset-");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, "test", path, ".."), { recursive: true });
    writeFileSync(join(root, "test", path), text);
  }
  return root;
}

describe("the unit subset", () => {
  it("leaves out a test that reaches a heavy import through a cycle, whichever test is met first", () => {
    const root = tree({
      "helpers/x.ts": 'import "./y.js";\nimport "node:child_process";\n',
      "helpers/y.ts": 'import "./x.js";\n',
      "helpers/light.ts": 'import { join } from "node:path";\nexport const j = join;\n',
      "a.test.ts": 'import "./helpers/x.js";\n',
      "b.test.ts": 'import "./helpers/y.js";\n',
      "c.test.ts": 'import { j } from "./helpers/light.js";\n',
      "d.test.ts": 'import type { Kernels } from "./helpers/x.js";\n',
    });
    expect(unitTestFiles(root)).toEqual(["c.test.ts", "d.test.ts"].map((f) => join("test", f)));
  });
});
