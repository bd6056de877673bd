/**
 * What this machine offers `hsm`: the native core, onnxruntime's execution
 * providers (CPU, CUDA, WebGPU), the WebGPU adapter of the `webgpu` package with
 * its features and limits, and the TensorFlow.js backends of `hsm metrics`; for
 * each one missing, the command or step that adds it. Everything that may print
 * from Dawn or a Vulkan driver, or hang on a broken one, is tried in a child
 * process whose output is captured, under a time limit.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { kernelOptions, nativeKernels } from "../kernels/default.js";
import { nativeLoadErrors, nativeSimdLevel, nativeSimdLevels } from "../kernels/native.js";
import { CUDA_HELP, missingAdapter, probeWebgpu, WEBGPU_HELP } from "./session.js";

/** One device or backend looked for. */
export interface DeviceFinding {
  /** What was looked for: "native core", "onnxruntime cuda", "metrics webgpu", …. */
  name: string;
  available: boolean;
  /** What was found, or why it is missing, in one line. */
  detail: string;
  /** Where it is missing: the command or step that adds it. */
  fix?: string;
}

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

/** Everything `hsm doctor` reports. */
export interface DeviceReport {
  findings: DeviceFinding[];
  /** The `webgpu` package's adapter; null where none is found. */
  adapter: WebgpuAdapter | null;
}

const LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxComputeWorkgroupSizeX",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupStorageSize",
  "maxComputeWorkgroupsPerDimension",
];

/** How long a probe in a child process may take before it counts as hung. */
const PROBE_MS = 60_000;

const require = createRequire(import.meta.url);

function resolves(pkg: string): string | undefined {
  try {
    return require.resolve(pkg);
  } catch {
    return undefined;
  }
}

/** Runs `script` in a child node with output captured: its JSON answer, or why there was none. */
function child(script: string): { answer: unknown } | { failed: string } {
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

function nativeFinding(): DeviceFinding {
  const name = "native core";
  if (nativeKernels(kernelOptions())) {
    const levels = nativeSimdLevels.join(", ");
    return { name, available: true, detail: `loaded; SIMD level ${nativeSimdLevel()} (this CPU offers ${levels})` };
  }
  const why = process.env.HSM_NATIVE === "0" ? "HSM_NATIVE=0 is set" : (nativeLoadErrors[0] ?? "not built");
  return {
    name,
    available: false,
    detail: `not loaded (${why}); hsm runs its TypeScript fallback`,
    fix: "npm run build:native",
  };
}

/** onnxruntime-node's CUDA provider: its library beside the binding, for this platform. */
function cudaFinding(): DeviceFinding {
  const name = "onnxruntime cuda";
  const bin = join(dirname(dirname(resolves("onnxruntime-node")!)), "bin");
  const platform = join(bin, "napi-v6", process.platform, process.arch);
  const lib = "libonnxruntime_providers_cuda.so";
  if (existsSync(platform) && readdirSync(platform).some((f) => f.startsWith(lib)))
    return { name, available: true, detail: `${lib} is installed (--device cuda)` };
  return { name, available: false, detail: `${lib} is not in ${platform}`, fix: CUDA_HELP };
}

function ortWebgpuFinding(): DeviceFinding {
  const name = "onnxruntime webgpu";
  const probe = probeWebgpu();
  const why = probe.message;
  if (why === undefined) {
    const f16 = probe.float16
      ? "float16 graphs too"
      : "float16 graphs widened to float32: the adapter lacks shader-f16";
    return { name, available: true, detail: `the WebGPU execution provider runs (--device webgpu; ${f16})` };
  }
  const detail = missingAdapter(why) ?? why.split("\n")[0]!;
  return { name, available: false, detail, fix: WEBGPU_HELP };
}

/** The `webgpu` package's adapter, asked for in a child process: the adapter, or why there is none. */
function probeAdapter(): WebgpuAdapter | string {
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

function adapterFinding(adapter: WebgpuAdapter | string): DeviceFinding {
  const name = "webgpu adapter";
  if (typeof adapter === "string") {
    const fix = adapter.includes("not installed") ? "npm install webgpu @tensorflow/tfjs-backend-webgpu" : WEBGPU_HELP;
    return { name, available: false, detail: adapter, fix };
  }
  const what = [adapter.vendor, adapter.architecture].filter(Boolean).join(" ");
  const f16 = adapter.shaderF16 ? "shader-f16" : "no shader-f16";
  return { name, available: true, detail: `${adapter.description || adapter.device} (${what}); ${f16}` };
}

/** Whether TensorFlow.js's Node binding `pkg` loads, tried in a child (it prints as it loads). */
function tfjsNodeFinding(pkg: "@tensorflow/tfjs-node" | "@tensorflow/tfjs-node-gpu"): DeviceFinding {
  const name = `metrics ${pkg.slice("@tensorflow/".length)}`;
  const fix = `npm install ${pkg}`;
  const path = resolves(pkg);
  if (!path) return { name, available: false, detail: `${pkg} is not installed`, fix };
  const r = child(
    `try { require(${JSON.stringify(path)}); process.stdout.write("true"); } ` +
      `catch (e) { process.stdout.write(JSON.stringify(String(e.message).split("\\n")[0])); }`,
  );
  if ("answer" in r && r.answer === true)
    return { name, available: true, detail: `${pkg} loads (--backend ${name.slice(8)})` };
  const why = "failed" in r ? r.failed : String(r.answer);
  return {
    name,
    available: false,
    detail: `${pkg} is installed but does not load (${why})`,
    fix: `npm rebuild ${pkg}`,
  };
}

function tfjsFindings(adapter: WebgpuAdapter | string): DeviceFinding[] {
  const wasm = resolves("@tensorflow/tfjs-backend-wasm") !== undefined;
  const webgpuPkg = resolves("@tensorflow/tfjs-backend-webgpu") !== undefined;
  const webgpu: DeviceFinding =
    typeof adapter !== "string" && webgpuPkg
      ? { name: "metrics webgpu", available: true, detail: "TensorFlow.js WebGPU on that adapter (--backend webgpu)" }
      : {
          name: "metrics webgpu",
          available: false,
          detail: webgpuPkg ? `no adapter: ${adapter as string}` : "@tensorflow/tfjs-backend-webgpu is not installed",
          fix: webgpuPkg && resolves("webgpu") ? WEBGPU_HELP : "npm install webgpu @tensorflow/tfjs-backend-webgpu",
        };
  return [
    wasm
      ? { name: "metrics wasm", available: true, detail: "TensorFlow.js WebAssembly (--backend wasm)" }
      : {
          name: "metrics wasm",
          available: false,
          detail: "not installed",
          fix: "npm install @tensorflow/tfjs-backend-wasm",
        },
    webgpu,
    tfjsNodeFinding("@tensorflow/tfjs-node"),
    tfjsNodeFinding("@tensorflow/tfjs-node-gpu"),
  ];
}

/** Looks for every device and backend `hsm` can use here; never throws for a missing one, and never hangs. */
export function examineDevices(): DeviceReport {
  const adapter = probeAdapter();
  const findings: DeviceFinding[] = [
    nativeFinding(),
    { name: "onnxruntime cpu", available: true, detail: "always (--device cpu)" },
    cudaFinding(),
    ortWebgpuFinding(),
    adapterFinding(adapter),
    ...tfjsFindings(adapter),
  ];
  return { findings, adapter: typeof adapter === "string" ? null : adapter };
}
