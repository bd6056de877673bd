/**
 * A GPU for the tests on a machine without one: Debian's chromium ships SwiftShader, a Vulkan driver that runs on the
 * CPU, and Dawn (behind onnxruntime's WebGPU provider and the `webgpu` package) finds it as an adapter when the
 * dynamic loader and the Vulkan loader are pointed at it. The variables must be set before a process starts, so GPU
 * tests run `hsm` (or a small script) in a child process with {@link gpuEnv}. They skip where no adapter is found,
 * unless HSM_REQUIRE_GPU=1 (as in CI) makes that a failure.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";

const SWIFTSHADER_DIR = "/usr/lib/chromium";
const SWIFTSHADER_ICD = `${SWIFTSHADER_DIR}/vk_swiftshader_icd.json`;

const gpuRequired = process.env.HSM_REQUIRE_GPU === "1";

/**
 * The environment for a child process that should see a WebGPU adapter: the caller's own where it already names a
 * Vulkan driver (a machine with a real GPU), else SwiftShader's.
 */
export function gpuEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const own = process.env.VK_ICD_FILENAMES !== undefined || !existsSync(SWIFTSHADER_ICD);
  const software = own
    ? {}
    : {
        LD_LIBRARY_PATH: [SWIFTSHADER_DIR, process.env.LD_LIBRARY_PATH].filter(Boolean).join(":"),
        VK_ICD_FILENAMES: SWIFTSHADER_ICD,
      };
  return { ...process.env, ...software, ...extra };
}

/** Asks the `webgpu` package for an adapter in a child process with {@link gpuEnv}; its features, or why none. */
function findAdapter(): { features: string[] } | { missing: string } {
  const webgpu = createRequire(import.meta.url).resolve("webgpu");
  const script =
    `const { create, globals } = require(${JSON.stringify(webgpu)}); Object.assign(globalThis, globals);` +
    `create([]).requestAdapter().then((a) => { process.stdout.write(JSON.stringify(a ? [...a.features] : null));` +
    ` process.exit(0); }, (e) => { process.stdout.write(JSON.stringify(String(e))); process.exit(0); });`;
  const r = spawnSync(process.execPath, ["-e", script], { env: gpuEnv(), encoding: "utf8", timeout: 60_000 });
  let answer: unknown;
  try {
    answer = JSON.parse(r.stdout);
  } catch {
    return { missing: `the adapter probe ended without an answer (${r.error?.message ?? r.status ?? r.signal})` };
  }
  if (Array.isArray(answer)) return { features: answer as string[] };
  if (answer === null) {
    const hint = existsSync(SWIFTSHADER_ICD) ? "" : ` (${SWIFTSHADER_ICD} is missing: apt-get install chromium)`;
    return { missing: `no WebGPU adapter was found${hint}` };
  }
  return { missing: `the adapter probe failed: ${String(answer)}` };
}

const adapter = findAdapter();

/** Why the GPU tests are skipped here, or undefined where an adapter is found. */
export const gpuSkipReason: string | undefined = "missing" in adapter ? adapter.missing : undefined;

/** The adapter's features (empty where there is none); SwiftShader's lack `shader-f16`. */
export const gpuFeatures: string[] = "features" in adapter ? adapter.features : [];

if (gpuRequired && gpuSkipReason !== undefined) throw new Error(`HSM_REQUIRE_GPU=1 but ${gpuSkipReason}`);
