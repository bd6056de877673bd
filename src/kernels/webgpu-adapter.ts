/**
 * The WebGPU adapter of the `webgpu` package (Dawn), looked for in a child
 * process whose output is captured, under a time limit: Dawn and the Vulkan
 * drivers print warnings of their own straight to stderr while they look, and
 * a broken driver can hang. `hsm doctor` reports what is found; the metrics'
 * WebGPU backend asks before it loads Dawn itself.
 */
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

/** The WebGPU adapter the `webgpu` package (Dawn) finds. */
export interface WebgpuAdapter {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** Every feature it offers, sorted. */
  features: string[];
  /** Whether shaders may compute in float16 (the `shader-f16` feature). */
  shaderF16: boolean;
  /** The limits that bound a compute workload. */
  limits: Record<string, number>;
}

const LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxComputeWorkgroupSizeX",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupStorageSize",
  "maxComputeWorkgroupsPerDimension",
];

/** How long a probe in a child process may take before it counts as hung (docs/extract.md states it). */
export const PROBE_MS = 60_000;

const require = createRequire(import.meta.url);

export function resolves(pkg: string): string | undefined {
  try {
    return require.resolve(pkg);
  } catch {
    return undefined;
  }
}

/** Runs `script` in a child node with output captured: its JSON answer, or why there was none. */
export function child(script: string): { answer: unknown } | { failed: string } {
  const r = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", timeout: PROBE_MS });
  try {
    // The answer is the last line: a library may print before it.
    return { answer: JSON.parse(r.stdout.trimEnd().split("\n").at(-1)!) };
  } catch {
    const why = r.error?.message.includes("ETIMEDOUT")
      ? `no answer within ${PROBE_MS / 1000} s`
      : (r.error?.message ?? `exit status ${r.status ?? r.signal}`);
    return { failed: `the probe ended without an answer (${why})` };
  }
}

/** The `webgpu` package's adapter, asked for in a child process: the adapter, or why there is none. */
export function probeAdapter(): WebgpuAdapter | string {
  const webgpu = resolves("webgpu");
  if (!webgpu) return "the optional package webgpu is not installed";
  const script =
    `const { create, globals } = require(${JSON.stringify(webgpu)}); Object.assign(globalThis, globals);` +
    `const out = (x) => { process.stdout.write(JSON.stringify(x)); process.exit(0); };` +
    `create([]).requestAdapter().then((a) => { if (!a) return out(null); const i = a.info ?? {}; const limits = {};` +
    ` for (const k of ${JSON.stringify(LIMITS)}) if (typeof a.limits[k] === "number") limits[k] = a.limits[k];` +
    ` out({ vendor: i.vendor ?? "", architecture: i.architecture ?? "", device: i.device ?? "",` +
    ` description: i.description ?? "", features: [...a.features].sort(), limits }); }, (e) => out(String(e)));`;
  const r = child(script);
  if ("failed" in r) return r.failed;
  if (r.answer === null) return "no WebGPU adapter was found";
  if (typeof r.answer === "string") return `the adapter probe failed: ${r.answer}`;
  const a = r.answer as Omit<WebgpuAdapter, "shaderF16">;
  return { ...a, shaderF16: a.features.includes("shader-f16") };
}
