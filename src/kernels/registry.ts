/**
 * Where the heavy arithmetic runs. A backend implements some kernels and
 * names the backend its missing kernels fall back to, kernel by kernel;
 * choosing a backend chooses the whole resolved set, and the set records which
 * implementation serves each kernel.
 *
 * | backend | implements | falls back to |
 * |---|---|---|
 * | `native` | everything (hashing included) | `typescript` (where the addon is missing a kernel) |
 * | `tfjs-node`, `tfjs-node-gpu`, `webgpu`, `wasm` | rank, products, rowsTimes (TensorFlow.js) | `native`, then `typescript` |
 * | `typescript` | everything | — |
 *
 * A fallback that cannot run here (the native core not loaded) is passed over
 * for the next one; only the backend chosen must run.
 *
 * `auto` takes the first available of native, tfjs-node-gpu, webgpu,
 * tfjs-node, wasm.
 */
import { HsmError, InternalError, UsageError } from "../errors.js";
import { nativeLoadErrors, nativeSimd } from "./native.js";
import { kernelOptions, nativeCoreFix, nativeKernels } from "./default.js";
import { tfKernels, TfUnavailable, type TfBackendName } from "./tfjs.js";
import { typescriptKernels } from "./typescript/index.js";
import { KERNEL_NAMES, type KernelName, type KernelOptions, type Kernels } from "./types.js";

import { BACKENDS, type BackendName } from "./names.js";

export { BACKENDS, type BackendName };
export type ConcreteBackend = Exclude<BackendName, "auto">;

/** A backend cannot run here; the message says why and what to do. */
export class BackendUnavailable extends HsmError {
  constructor(
    message: string,
    /** Its packages are not installed (rather than installed and unable to run). */
    readonly notInstalled = false,
  ) {
    super(message);
  }
}

interface BackendDef {
  /** Where kernels this backend lacks come from. */
  fallback: ConcreteBackend | null;
  /** The kernels it implements; throws BackendUnavailable where it cannot run. */
  load(o: KernelOptions): Promise<Partial<Kernels>>;
  /** The TensorFlow.js backend behind it, for the result's detail ("none" otherwise). */
  tfjs: string;
}

function tfBackend(name: TfBackendName): BackendDef {
  return {
    fallback: "native",
    tfjs: name,
    async load() {
      try {
        return await tfKernels(name);
      } catch (err) {
        if (err instanceof TfUnavailable) throw new BackendUnavailable(err.message, err.notInstalled);
        throw err;
      }
    },
  };
}

const DEFINITIONS: Record<ConcreteBackend, BackendDef> = {
  typescript: { fallback: null, tfjs: "none", load: async () => typescriptKernels },
  native: {
    fallback: "typescript",
    tfjs: "none",
    async load(o) {
      const k = nativeKernels(o);
      if (!k && process.env.HSM_NATIVE === "0") {
        // Built or not, the core is turned off: building it would change nothing.
        throw new BackendUnavailable(
          `--backend native needs the native core, which HSM_NATIVE=0 turns off; ${nativeCoreFix()}, or use --backend wasm`,
        );
      }
      if (!k) {
        throw new BackendUnavailable(
          `--backend native needs the native core, which is not loaded here; to load it: ${nativeCoreFix()}, or use --backend wasm\n${nativeLoadErrors.map((e) => `  tried ${e}`).join("\n")}`,
        );
      }
      return k;
    },
  },
  "tfjs-node": tfBackend("tfjs-node"),
  "tfjs-node-gpu": tfBackend("tfjs-node-gpu"),
  webgpu: tfBackend("webgpu"),
  wasm: tfBackend("wasm"),
};

/** The order `auto` tries. */
const AUTO_ORDER: ConcreteBackend[] = ["native", "tfjs-node-gpu", "webgpu", "tfjs-node", "wasm"];

/** A complete kernel set, and what computes each kernel. */
export interface ResolvedKernels {
  /** The backend chosen. */
  readonly backend: ConcreteBackend;
  readonly kernels: Kernels;
  /** Per kernel, the backend whose implementation runs. */
  readonly implementations: Record<KernelName, ConcreteBackend>;
  /** The TensorFlow.js backend in use ("none" without one) and the native core's code path ("typescript" where no native kernel runs). */
  readonly detail: { tfjs: string; simd: string };
}

export interface OpenOptions extends Partial<KernelOptions> {
  /** Told one line per backend `auto` passes over because it cannot run here. */
  onSkip?: (backend: ConcreteBackend, reason: string) => void;
}

/**
 * A backend's kernels completed kernel by kernel from `chain`: the backend
 * first, then its fallbacks in order, the last of which implements every
 * kernel. Also says which backend serves each kernel.
 */
export function completeKernels<N extends string>(
  chain: readonly { name: N; kernels: Partial<Kernels> }[],
): { kernels: Kernels; implementations: Record<KernelName, N> } {
  const kernels = {} as Record<KernelName, unknown>;
  const implementations = {} as Record<KernelName, N>;
  for (const k of KERNEL_NAMES) {
    const from = chain.find((c) => c.kernels[k] !== undefined);
    if (!from) {
      throw new InternalError(`Expected a backend in ${chain.map((c) => c.name).join(" → ")} to implement ${k}`);
    }
    kernels[k] = from.kernels[k];
    implementations[k] = from.name;
  }
  return { kernels: kernels as unknown as Kernels, implementations };
}

async function resolve(name: ConcreteBackend, o: KernelOptions): Promise<ResolvedKernels> {
  const chain: { name: ConcreteBackend; kernels: Partial<Kernels> }[] = [];
  for (let b: ConcreteBackend | null = name; b; b = DEFINITIONS[b].fallback) {
    try {
      chain.push({ name: b, kernels: await DEFINITIONS[b].load(o) });
    } catch (err) {
      if (b === name || !(err instanceof BackendUnavailable)) throw err;
    }
  }
  const { kernels, implementations } = completeKernels(chain);
  const usesNative = Object.values(implementations).includes("native");
  return {
    backend: name,
    kernels,
    implementations,
    detail: { tfjs: DEFINITIONS[name].tfjs, simd: usesNative ? nativeSimd! : "typescript" },
  };
}

/**
 * The kernel set of backend `name`. A named backend that cannot run here
 * throws BackendUnavailable; `auto` moves on to the next, telling `onSkip`
 * why (silently past TensorFlow.js packages that are not installed).
 */
export async function openKernels(name: BackendName, o: OpenOptions = {}): Promise<ResolvedKernels> {
  if (!BACKENDS.includes(name)) throw new UsageError(`Expected --backend ${BACKENDS.join("|")} but received "${name}"`);
  const options = kernelOptions(o);
  if (name !== "auto") return resolve(name, options);
  for (const candidate of AUTO_ORDER) {
    try {
      return await resolve(candidate, options);
    } catch (err) {
      if (!(err instanceof BackendUnavailable)) throw err;
      if (!err.notInstalled) o.onSkip?.(candidate, err.message.split("\n")[0]!);
    }
  }
  return resolve("typescript", options);
}
