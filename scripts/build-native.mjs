#!/usr/bin/env node
// Builds the native core (native/) with node-gyp. Runs on `npm install`; a
// failed build leaves the pure-TypeScript fallback in charge and says so.
// `--strict` (npm run build:native) makes a failed build an error instead.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const strict = process.argv.includes("--strict");

if (process.env.HSM_SKIP_NATIVE === "1") {
  console.log("hsm: HSM_SKIP_NATIVE=1, not building the native core");
  process.exit(0);
}

function nodeGyp() {
  // npm hands its bundled node-gyp to install scripts; outside npm, look for one.
  if (process.env.npm_config_node_gyp && existsSync(process.env.npm_config_node_gyp)) {
    return process.env.npm_config_node_gyp;
  }
  const npmDir = join(dirname(process.execPath), "..", "lib", "node_modules", "npm");
  for (const candidate of [
    join(npmDir, "node_modules", "node-gyp", "bin", "node-gyp.js"),
    "/usr/share/nodejs/node-gyp/bin/node-gyp.js",
  ]) {
    if (existsSync(candidate)) return candidate;
  }
  try {
    return createRequire(import.meta.url).resolve("node-gyp/bin/node-gyp.js");
  } catch {
    return undefined;
  }
}

const gyp = nodeGyp();
if (!gyp) finish(1, "node-gyp was not found");
const args = [gyp, "rebuild", "--release"];
// Build against the headers that ship with this Node when they are installed,
// so no download is needed.
if (
  !process.env.npm_config_nodedir &&
  existsSync(join(dirname(process.execPath), "..", "include", "node", "node_api.h"))
) {
  args.push(`--nodedir=${join(dirname(process.execPath), "..")}`);
}
const run = spawnSync(process.execPath, args, { cwd: join(root, "native"), stdio: "inherit" });
finish(run.status ?? 1, run.error ? String(run.error) : `node-gyp exited with ${run.status}`);

function finish(status, why) {
  if (status === 0) {
    console.log("hsm: native core built (native/build/Release/hsm_native.node)");
    process.exit(0);
  }
  // Installed as a package, hsm has no `npm run` script at hand in the user's project: name the script itself.
  const script = join(root, "scripts", "build-native.mjs");
  const again =
    basename(dirname(root)) === "node_modules"
      ? `node ${/^[\w./@+-]+$/.test(script) ? script : `'${script.replace(/'/g, `'\\''`)}'`} --strict`
      : "npm run build:native";
  const message =
    `hsm: the native core did not build (${why}); hsm will use its TypeScript fallback, which is slower. ` +
    `Install a C++ compiler, Python 3 and make, then run: ${again}`;
  console.warn(message);
  process.exit(strict ? 1 : 0);
}
