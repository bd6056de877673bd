/**
 * Where the metrics' heavy arithmetic runs. Every backend computes the same
 * numbers within metrics.md's tolerances:
 * - `native`: the native core for everything heavy — ISS's fused rank kernel
 *   (both cores, the similarity matrix never held), the probe's products and
 *   the bootstrap replicates.
 * - `tfjs-node`, `wasm`: TensorFlow.js for everything — the similarity
 *   products in row blocks (ranks counted as each block arrives) and the
 *   probe's products. `tfjs-node` only where the user installed it.
 * - `typescript`: plain loops; the reference, slow.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { HsmError, UsageError } from "../errors.js";
import { kernels, nativeKernels } from "../native/index.js";
import { kernelProducts, typescriptProducts, type RowProducts } from "./probe.js";
import { rankAgainstAnchorsTs } from "./rank.js";

export const BACKENDS = ["auto", "native", "tfjs-node", "wasm", "typescript"] as const;
export type BackendName = (typeof BACKENDS)[number];

export interface MetricsBackend {
  readonly name: Exclude<BackendName, "auto">;
  /** Which TensorFlow.js backend serves the products ("none" for typescript). */
  readonly tfjs: string;
  /** See Kernels.rankAgainstAnchors; `rows` selects and orders the rows of x. */
  rank(x: Float32Array, rows: Int32Array, a: Float32Array, nAnchors: number, d: number, own: Int32Array, ownScore: Float32Array, above: Int32Array): Promise<void>;
  products(h: Float32Array, n: number, d: number): Promise<RowProducts>;
}

type Tf = typeof import("@tensorflow/tfjs-core");

let tfPromise: Promise<{ tf: Tf; name: string }> | undefined;

/** Loads TensorFlow.js once, on tfjs-node when installed (and wanted), else on wasm. */
async function loadTf(want: "tfjs-node" | "wasm" | "best"): Promise<{ tf: Tf; name: string }> {
  tfPromise ??= (async () => {
    const tf = await import("@tensorflow/tfjs-core");
    if (want !== "wasm") {
      try {
        await import("@tensorflow/tfjs-node" as string);
        await tf.setBackend("tensorflow");
        await tf.ready();
        return { tf, name: "tfjs-node" };
      } catch (err) {
        if (want === "tfjs-node") {
          throw new HsmError(`--backend tfjs-node needs @tensorflow/tfjs-node, which is not installed here (${(err as Error).message.split("\n")[0]}); npm install @tensorflow/tfjs-node, or use --backend wasm`);
        }
      }
    }
    const wasm = await import("@tensorflow/tfjs-backend-wasm");
    const dir = dirname(createRequire(import.meta.url).resolve("@tensorflow/tfjs-backend-wasm"));
    wasm.setWasmPaths(join(dir, "/"));
    await tf.setBackend("wasm");
    await tf.ready();
    return { tf, name: "wasm" };
  })();
  return tfPromise;
}

function tfProducts(tf: Tf, h: Float32Array, n: number, d: number): RowProducts {
  const H = tf.tensor2d(h.subarray(0, n * d), [n, d]);
  const HT = tf.transpose(H);
  return {
    n,
    d,
    async times(v, k) {
      const vm = new Float32Array(d * k);
      for (let j = 0; j < k; j++) for (let c = 0; c < d; c++) vm[c * k + j] = v[j * d + c]!;
      const V = tf.tensor2d(vm, [d, k]);
      const out = tf.matMul(H, V);
      const data = Float64Array.from(await out.data());
      V.dispose();
      out.dispose();
      return data;
    },
    async transposeTimes(g, k) {
      const G = tf.tensor2d(Float32Array.from(g), [n, k]);
      const out = tf.matMul(HT, G);
      const rowMajor = await out.data();
      G.dispose();
      out.dispose();
      const cols = new Float64Array(d * k);
      for (let c = 0; c < d; c++) for (let j = 0; j < k; j++) cols[j * d + c] = rowMajor[c * k + j]!;
      return cols;
    },
    dispose() {
      H.dispose();
      HT.dispose();
    },
  };
}

/** Gathers `rows` of x into a contiguous block. */
function gather(x: Float32Array, rows: Int32Array, from: number, to: number, d: number): Float32Array {
  const out = new Float32Array((to - from) * d);
  for (let i = from; i < to; i++) out.set(x.subarray(rows[i]! * d, (rows[i]! + 1) * d), (i - from) * d);
  return out;
}

export async function openBackend(name: BackendName = "auto"): Promise<MetricsBackend> {
  if (!BACKENDS.includes(name)) throw new UsageError(`Expected --backend ${BACKENDS.join("|")} but received "${name}"`);
  const threads = Math.max(1, (await import("node:os")).availableParallelism());
  if (name === "typescript") {
    return {
      name: "typescript",
      tfjs: "none",
      async rank(x, rows, a, nA, d, own, ownScore, above) {
        rankAgainstAnchorsTs(gather(x, rows, 0, rows.length, d), rows.length, a, nA, d, own, ownScore, above, 1);
      },
      async products(h, n, d) {
        return typescriptProducts(h, n, d);
      },
    };
  }
  if (name === "native" || (name === "auto" && nativeKernels && process.env.HSM_NATIVE !== "0")) {
    if (!nativeKernels || process.env.HSM_NATIVE === "0") {
      throw new HsmError("--backend native needs the native core, which is not built here; run npm run build:native, or use --backend wasm");
    }
    const k = kernels();
    return {
      name: "native",
      tfjs: "none",
      async rank(x, rows, a, nA, d, own, ownScore, above) {
        // The kernel reads contiguous rows; gather them in slices to bound the copy.
        const slice = 8192;
        for (let from = 0; from < rows.length; from += slice) {
          const to = Math.min(rows.length, from + slice);
          k.rankAgainstAnchors(gather(x, rows, from, to, d), to - from, a, nA, d, own.subarray(from, to), ownScore.subarray(from, to), above.subarray(from, to), threads);
        }
      },
      async products(h, n, d) {
        return kernelProducts(h, n, d, k, threads);
      },
    };
  }
  const { tf, name: tfName } = await loadTf(name === "auto" ? "best" : name);
  return {
    name: tfName as "wasm" | "tfjs-node",
    tfjs: tfName,
    async rank(x, rows, a, nA, d, own, ownScore, above) {
      const A = tf.tensor2d(a.subarray(0, nA * d), [nA, d]);
      const AT = tf.transpose(A);
      A.dispose();
      const block = 1024;
      for (let from = 0; from < rows.length; from += block) {
        const to = Math.min(rows.length, from + block);
        const X = tf.tensor2d(gather(x, rows, from, to, d), [to - from, d]);
        const S = tf.matMul(X, AT);
        const s = await S.data();
        X.dispose();
        S.dispose();
        for (let i = from; i < to; i++) {
          const o = own[i]!;
          const base = (i - from) * nA;
          if (o < 0) {
            ownScore[i] = 0;
            above[i] = 0;
            continue;
          }
          const mine = s[base + o]!;
          let count = 0;
          for (let g = 0; g < nA; g++) if (g !== o && s[base + g]! > mine) count++;
          ownScore[i] = mine;
          above[i] = count;
        }
      }
      AT.dispose();
    },
    async products(h, n, d) {
      return tfProducts(tf, h, n, d);
    },
  };
}
