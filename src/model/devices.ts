/**
 * What this machine offers `hsm`: the native core, onnxruntime's execution
 * providers (CPU, CUDA, WebGPU), the WebGPU adapter of the `webgpu` package with
 * its features and limits, and the TensorFlow.js backends of `hsm metrics`; for
 * each one missing, the command or step that adds it. Everything that may print
 * from Dawn or a Vulkan driver, or hang on a broken one, is tried in a child
 * process whose output is captured, under a time limit.
 */
import { kernelOptions, nativeCoreFix, nativeKernels } from "../kernels/default.js";
import { nativeLoadErrors, nativeSimdLevel, nativeSimdLevels } from "../kernels/native.js";
import {
  bindingFolder,
  CUDA_HELP,
  CUDA_LIBRARY,
  cudaLibrary,
  missingAdapter,
  probeWebgpu,
  VULKAN_HELP,
  WEBGPU_HELP,
} from "./session.js";
import { child, probeAdapter, resolves, type WebgpuAdapter } from "../kernels/webgpu-adapter.js";

/** The fix of the `webgpu` package's adapter, which only `hsm metrics` uses: its other backends are the way round. */
const METRICS_WEBGPU_HELP = `${VULKAN_HELP}, or use hsm metrics --backend native or wasm`;

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

/** Everything `hsm doctor` reports. */
export interface DeviceReport {
  findings: DeviceFinding[];
  /** The `webgpu` package's adapter; null where none is found. */
  adapter: WebgpuAdapter | null;
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
    fix: nativeCoreFix(),
  };
}

/** onnxruntime-node's CUDA provider: its library beside the binding, for this platform. */
function cudaFinding(): DeviceFinding {
  const name = "onnxruntime cuda";
  const folder = bindingFolder();
  if (cudaLibrary(folder) !== undefined)
    return { name, available: true, detail: `${CUDA_LIBRARY} is installed (--device cuda)` };
  return { name, available: false, detail: `${CUDA_LIBRARY} is not in ${folder}`, fix: CUDA_HELP };
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

function adapterFinding(adapter: WebgpuAdapter | string): DeviceFinding {
  const name = "webgpu adapter";
  if (typeof adapter === "string") {
    const fix = adapter.includes("not installed")
      ? "npm install webgpu @tensorflow/tfjs-backend-webgpu"
      : METRICS_WEBGPU_HELP;
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
          fix:
            webgpuPkg && resolves("webgpu")
              ? METRICS_WEBGPU_HELP
              : "npm install webgpu @tensorflow/tfjs-backend-webgpu",
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
