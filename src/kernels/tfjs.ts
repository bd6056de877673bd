/**
 * The TensorFlow.js kernels: ISS's similarity products in row blocks (ranks
 * counted as each block arrives, the similarity matrix never held) and the
 * probe's products, on whichever TensorFlow.js backend is named — `wasm`
 * (always installed), `tfjs-node` and `tfjs-node-gpu` (where the user
 * installed them), `webgpu` (Dawn through the `webgpu` package, where a GPU
 * adapter exists). Everything else falls back to the TypeScript kernels.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import type { Kernels, RowProducts } from "./types.js";
import { f16ToF32 } from "./typescript/float16.js";

type Tf = typeof import("@tensorflow/tfjs-core");

export type TfBackendName = "wasm" | "tfjs-node" | "tfjs-node-gpu" | "webgpu";

/** Why a TensorFlow.js backend cannot run here: its packages are not installed, or it found no device. */
export class TfUnavailable extends Error {
  constructor(
    message: string,
    readonly notInstalled: boolean,
  ) {
    super(message);
  }
}

/** The TensorFlow.js backend each of ours registers. */
const TF_NAME: Record<TfBackendName, string> = {
  wasm: "wasm",
  "tfjs-node": "tensorflow",
  "tfjs-node-gpu": "tensorflow",
  webgpu: "webgpu",
};

const loaded = new Map<TfBackendName, Promise<Tf>>();

function firstLine(err: unknown): string {
  return String((err as Error)?.message ?? err).split("\n")[0]!;
}

const noAdapter = () =>
  new TfUnavailable(
    "--backend webgpu found no GPU adapter (Dawn needs a GPU with a Vulkan driver); use --backend native or wasm",
    false,
  );

/** Imports what backend `name` needs and registers it with TensorFlow.js. */
async function register(name: TfBackendName): Promise<void> {
  if (name === "wasm") {
    const wasm = await import("@tensorflow/tfjs-backend-wasm");
    wasm.setWasmPaths(join(dirname(createRequire(import.meta.url).resolve("@tensorflow/tfjs-backend-wasm")), "/"));
    return;
  }
  if (name === "webgpu") {
    // Dawn and the Vulkan drivers print their own warnings while they look for an adapter: where there is none,
    // a child process finds that out, and Dawn never runs in this one.
    // Imported here: the probe starts a process, which nothing else of this module does.
    const { probeAdapter, resolves } = await import("./webgpu-adapter.js");
    if (resolves("webgpu") !== undefined && typeof probeAdapter() === "string") throw noAdapter();
    let gpu: { requestAdapter(): Promise<unknown> };
    try {
      const dawn = (await import("webgpu" as string)) as { create(flags: string[]): typeof gpu; globals: object };
      Object.assign(globalThis, dawn.globals);
      gpu = dawn.create([]);
    } catch (err) {
      throw new TfUnavailable(
        `--backend webgpu needs the optional packages webgpu and @tensorflow/tfjs-backend-webgpu (${firstLine(err)})`,
        true,
      );
    }
    const adapter = await gpu.requestAdapter().catch(() => null);
    if (!adapter) throw noAdapter();
    if (!("navigator" in globalThis) || !(globalThis as { navigator?: object }).navigator) {
      Object.defineProperty(globalThis, "navigator", { value: {}, configurable: true, writable: true });
    }
    Object.defineProperty((globalThis as unknown as { navigator: object }).navigator, "gpu", {
      value: gpu,
      configurable: true,
    });
    try {
      await import("@tensorflow/tfjs-backend-webgpu" as string);
    } catch (err) {
      throw new TfUnavailable(`--backend webgpu needs @tensorflow/tfjs-backend-webgpu (${firstLine(err)})`, true);
    }
    return;
  }
  const pkg = name === "tfjs-node" ? "@tensorflow/tfjs-node" : "@tensorflow/tfjs-node-gpu";
  try {
    await import(pkg as string);
  } catch (err) {
    throw new TfUnavailable(
      `--backend ${name} needs ${pkg}, which is not installed here (${firstLine(err)}); npm install ${pkg}, or use --backend wasm`,
      true,
    );
  }
}

/** Loads TensorFlow.js on backend `name` once; throws TfUnavailable where it cannot run. */
function loadTf(name: TfBackendName): Promise<Tf> {
  let p = loaded.get(name);
  if (!p) {
    p = (async () => {
      const tf = await import("@tensorflow/tfjs-core");
      await register(name);
      if (!(await tf.setBackend(TF_NAME[name])))
        throw new TfUnavailable(`--backend ${name}: TensorFlow.js could not start its ${TF_NAME[name]} backend`, false);
      await tf.ready();
      return tf;
    })();
    loaded.set(name, p);
  }
  return p;
}

/** TensorFlow.js has one active backend per process: make it ours before each kernel. */
async function use(tf: Tf, name: TfBackendName): Promise<void> {
  if (tf.getBackend() !== TF_NAME[name]) await tf.setBackend(TF_NAME[name]);
}

/** Gathers `rows[from..to)` of x into a contiguous block. */
function gather(x: Float32Array, rows: Int32Array, from: number, to: number, d: number): Float32Array {
  const out = new Float32Array((to - from) * d);
  for (let i = from; i < to; i++) out.set(x.subarray(rows[i]! * d, (rows[i]! + 1) * d), (i - from) * d);
  return out;
}

/** Rows per similarity block. */
const RANK_BLOCK = 1024;
/** Rows per block of the out-of-fold scoring product. */
const SCORE_BLOCK = 8192;

/**
 * For rows `from`..`to` of a block's scores `s` (one row of `nA` anchor scores
 * each): the score of the row's own anchor and how many other anchors score above it (0 and 0 without one).
 */
function countAbove(
  s: ArrayLike<number>,
  from: number,
  to: number,
  nA: number,
  own: Int32Array,
  ownScore: Float32Array,
  above: Int32Array,
): void {
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

/** The kernels TensorFlow.js implements on backend `name` (loaded). */
export async function tfKernels(name: TfBackendName): Promise<Pick<Kernels, "rank" | "products" | "rowsTimes">> {
  const tf = await loadTf(name);
  /** V (k columns of d) as a d × k tensor. */
  const columns = (v: Float64Array, d: number, k: number) => {
    const vm = new Float32Array(d * k);
    for (let j = 0; j < k; j++) for (let c = 0; c < d; c++) vm[c * k + j] = v[j * d + c]!;
    return tf.tensor2d(vm, [d, k]);
  };
  return {
    async rank(x, rows, a, nA, d, own, ownScore, above) {
      await use(tf, name);
      const AT = tf.tidy(() => tf.transpose(tf.tensor2d(a.subarray(0, nA * d), [nA, d])));
      try {
        for (let from = 0; from < rows.length; from += RANK_BLOCK) {
          const to = Math.min(rows.length, from + RANK_BLOCK);
          const S = tf.tidy(() => tf.matMul(tf.tensor2d(gather(x, rows, from, to, d), [to - from, d]), AT));
          const s = await S.data();
          S.dispose();
          countAbove(s, from, to, nA, own, ownScore, above);
        }
      } finally {
        AT.dispose();
      }
    },
    async products(h, n, d): Promise<RowProducts> {
      await use(tf, name);
      const H = tf.tensor2d(h.subarray(0, n * d), [n, d]);
      const HT = tf.transpose(H);
      return {
        n,
        d,
        async times(v, k) {
          await use(tf, name);
          const out = tf.tidy(() => tf.matMul(H, columns(v, d, k)));
          const data = Float64Array.from(await out.data());
          out.dispose();
          return data;
        },
        async transposeTimes(g, k) {
          await use(tf, name);
          const out = tf.tidy(() => tf.matMul(HT, tf.tensor2d(Float32Array.from(g), [n, k])));
          const rowMajor = await out.data();
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
    },
    async rowsTimes(h, n, d, v, k, out) {
      await use(tf, name);
      const V = columns(v, d, k);
      // Float16 rows are widened a block at a time into one buffer (exact, as the native core widens them).
      const wide = h instanceof Float32Array ? undefined : new Float32Array(Math.min(n, SCORE_BLOCK) * d);
      const block = (from: number, to: number): Float32Array => {
        if (h instanceof Float32Array) return h.subarray(from * d, to * d);
        const rows = wide!.subarray(0, (to - from) * d);
        f16ToF32(h.subarray(from * d, to * d), rows);
        return rows;
      };
      try {
        for (let from = 0; from < n; from += SCORE_BLOCK) {
          const to = Math.min(n, from + SCORE_BLOCK);
          const P = tf.tidy(() => tf.matMul(tf.tensor2d(block(from, to), [to - from, d]), V));
          out.set(await P.data(), from * k);
          P.dispose();
        }
      } finally {
        V.dispose();
      }
    },
  };
}
