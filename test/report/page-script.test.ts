/**
 * The report page's script is TypeScript (src/report/client/main.ts), checked
 * against the DOM in a program of its own; the page inlines the JavaScript that
 * scripts/build-page-script.mjs writes to src/report/client-script.ts. Here: the
 * source type-checks, the checked-in JavaScript is what the source builds, and
 * the Node code is compiled without the DOM.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { CLIENT_SCRIPT } from "../../src/report/client-script.js";

const root = join(import.meta.dirname, "..", "..");

describe("the report page's script", () => {
  it("type-checks against the DOM and is built from its source", () => {
    const check = () =>
      execFileSync(process.execPath, ["scripts/build-page-script.mjs", "--check"], { cwd: root, stdio: "pipe" });
    expect(check).not.toThrow();
  });

  it("is a classic strict-mode script that cannot end its <script> element early", () => {
    expect(CLIENT_SCRIPT.startsWith('"use strict";\n')).toBe(true);
    expect(CLIENT_SCRIPT).not.toMatch(/<\/script|^\s*(import|export)\b/im);
  });

  it("leaves the DOM out of the Node code's programs", () => {
    const lib = (file: string) => readFileSync(join(root, file), "utf8").match(/"lib":\s*\[[^\]]*\]/)?.[0] ?? "";
    expect(lib("tsconfig.json")).not.toMatch(/dom/i);
    expect(lib("src/report/client/tsconfig.json")).toMatch(/DOM/);
  });
});
