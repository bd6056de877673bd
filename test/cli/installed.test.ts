/**
 * hsm installed as users install it: the files `npm pack` ships, in the node_modules/hsm of a project (whose path
 * has a space), beside its dependencies but not its development dependencies, run from that project. What it tells
 * the user to run must work there.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { runChild } from "../helpers/child.js";
import { tempDir } from "../helpers/tmp.js";

const ROOT = join(import.meta.dirname, "..", "..");
const dir = tempDir("hsm-installed-");
const project = join(dir, "a project");
const installed = join(project, "node_modules", "hsm");
/** A stand-in for node-gyp that writes the folder it was run in to `gyp-cwd`, then exits with GYP_STATUS. */
const fakeGyp = join(dir, "fake-node-gyp.cjs");
/** The files `npm pack` ships, by path in the package. */
let shipped: Set<string>;

/** The environment of a user's shell: no native-core settings, npm's node-gyp replaced by the stand-in. */
function env(gypStatus: number): NodeJS.ProcessEnv {
  const { HSM_NATIVE: _n, HSM_NATIVE_PATH: _p, HSM_SKIP_NATIVE: _s, ...rest } = process.env;
  return { ...rest, npm_config_node_gyp: fakeGyp, GYP_STATUS: String(gypStatus) };
}

beforeAll(() => {
  const [pack] = JSON.parse(
    execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: ROOT, encoding: "utf8" }),
  ) as [{ files: { path: string }[] }];
  shipped = new Set(pack.files.map((f) => f.path));
  for (const path of shipped) cpSync(join(ROOT, path), join(installed, path));
  const { devDependencies } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
    devDependencies: Record<string, string>;
  };
  const link = (name: string) => symlinkSync(join(ROOT, "node_modules", name), join(project, "node_modules", name));
  for (const name of readdirSync(join(ROOT, "node_modules"))) {
    if (name === "hsm" || name in devDependencies) continue;
    if (!name.startsWith("@")) {
      link(name);
      continue;
    }
    mkdirSync(join(project, "node_modules", name));
    for (const sub of readdirSync(join(ROOT, "node_modules", name))) {
      if (!(`${name}/${sub}` in devDependencies)) link(`${name}/${sub}`);
    }
  }
  writeFileSync(
    fakeGyp,
    `require("node:fs").writeFileSync(${JSON.stringify(join(dir, "gyp-cwd"))}, process.cwd());\n` +
      "process.exit(Number(process.env.GYP_STATUS));\n",
  );
}, 60_000);

describe("an installed hsm without its native core", () => {
  it("names a command that builds the core of the installed copy, from the user's project", async () => {
    const hsm = (...args: string[]) =>
      runChild(process.execPath, [join(installed, "bin", "hsm.js"), ...args], { cwd: project, env: env(0) });
    expect((await hsm("fixture", "fx", "--facts", "3", "--d", "4", "--quiet")).status).toBe(0);
    const verify = await hsm("verify", "fx/store");
    expect(verify.status).toBe(0);
    const fix = /the native core is not loaded.*To load it: (.+)$/m.exec(verify.stderr)?.[1];
    expect(fix, verify.stderr).toBeDefined();

    // npm's own install of the package fails to build it (no compiler, say) and names the same command.
    const install = await runChild(process.execPath, [join(installed, "scripts", "build-native.mjs")], {
      cwd: installed,
      env: env(1),
    });
    expect(install.status).toBe(0);
    expect(install.stderr).toContain(`then run: ${fix}\n`);

    // Run as the user would, in a shell in the project, it builds in the installed copy's native/ folder.
    const built = await runChild("/bin/sh", ["-c", fix!], { cwd: project, env: env(0) });
    expect(built.stderr).toBe("");
    expect(built.status).toBe(0);
    expect(readFileSync(join(dir, "gyp-cwd"), "utf8")).toBe(join(installed, "native"));
  }, 60_000);
});

describe("the package", () => {
  it("ships every page of docs/ that the README and hsm's messages send the user to", () => {
    const sources = readdirSync(join(ROOT, "src"), { recursive: true, encoding: "utf8" })
      .filter((p) => p.endsWith(".ts"))
      .map((p) => join(ROOT, "src", p));
    const cited = new Set<string>();
    for (const file of [join(ROOT, "README.md"), ...sources]) {
      for (const [page] of readFileSync(file, "utf8").matchAll(/docs\/[\w-]+\.md/g)) cited.add(page);
    }
    expect(cited.size).toBeGreaterThan(5);
    expect([...cited].filter((page) => !shipped.has(page))).toEqual([]);
  });
});

describe("an installed hsm without its development dependencies", () => {
  it("make-model --tokenizer qwen3 finds the tokenizer package hsm ships with", async () => {
    const made = await runChild(
      process.execPath,
      [
        join(installed, "bin", "hsm.js"),
        "make-model",
        "qwen",
        "--tokenizer",
        "qwen3",
        "--layers",
        "1",
        "--hidden",
        "8",
        "--heads",
        "1",
      ],
      { cwd: project, env: env(0) },
    );
    expect(made.stderr).toBe("");
    expect(made.status).toBe(0);
    expect(readdirSync(join(project, "qwen")).sort()).toEqual([
      "config.json",
      "model.onnx",
      "tokenizer.json",
      "tokenizer_config.json",
    ]);
  }, 60_000);
});
