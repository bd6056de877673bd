/**
 * onnxruntime-node sessions: CPU by default, CUDA or WebGPU on request — and a
 * clear error, never a silent fall-back, when the provider cannot run.
 *
 * The rewritten model reads its weights straight from the original file by
 * offset (external data), so it must sit in a folder where that file appears
 * under a plain name: onnxruntime refuses external data reached through a
 * symbolic link that leaves the model's folder. A hard link in a private
 * folder does (see stageModel); where the file system will not allow one, the
 * rewritten model is staged beside the original for the moment the session
 * loads, and failing that the weights are copied inline.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { access, constants, link, mkdir, mkdtemp, realpath, rm, unlink, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";

import * as ort from "onnxruntime-node";

import type { DEVICES } from "../defaults.js";
import { HsmError } from "../errors.js";
import { computeCores } from "../util/cores.js";
import { ModelDirError } from "./model-dir.js";
import {
  DataType,
  encodeModel,
  num,
  usesFloat16,
  valueInfo,
  type GraphProto,
  type ModelProto,
  type TensorProto,
} from "../onnx/graph.js";
import { decomposeGroupQueryAttention, groupQueryAttentionGap } from "../onnx/gqa.js";
import { widenFloat16 } from "../onnx/widen.js";
import { readInputSync } from "../util/fs.js";
import { onStopSignal } from "../util/stop.js";
import { checkExternalData, externalDataFiles, externalFile } from "./external-data.js";

// Failures reach the user as errors from here, with what to do; onnxruntime's own log lines would only repeat them.
ort.env.logLevel = "fatal";

export type Device = (typeof DEVICES)[number];

/** A device onnxruntime cannot use here, with what to install. */
export class DeviceError extends HsmError {}

/**
 * A model onnxruntime refuses to load, for `reason` (onnxruntime's first line, without the path of a file hsm
 * staged); with `file`, the user's graph file it names.
 */
export class ModelLoadError extends HsmError {
  constructor(
    readonly reason: string,
    readonly file?: string,
  ) {
    super(
      file === undefined
        ? `onnxruntime could not load the model: ${reason}`
        : `${file}: onnxruntime could not load the graph (${reason})`,
    );
  }
}

/** What every command that runs a model over a bank is told. */
export interface ModelRunOptions {
  modelDir: string;
  /** The graph to run when the folder holds several (`onnx/model_q4.onnx`, …); see model-dir.ts. */
  modelFile?: string;
  bank: string;
  out: string;
  /** Name recorded in the outputs; default the model folder's name. */
  model?: string;
  batchSize?: number;
  device?: Device;
  threads?: number;
  /**
   * Batches run at once, each by a session of its own (with its own copy of the weights) in a worker thread;
   * default DEFAULT_CPU_WORKERS on the CPU (fewer where their copies would take over half the available memory),
   * else 1. `threads` is then per session.
   */
  workers?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface SessionOptions {
  device?: Device;
  /** Intra-op threads; default: the cores this process may compute on ({@link computeCores}). */
  threads?: number;
  /**
   * False: idle intra-op threads sleep instead of spinning: spinning threads
   * take the cores from the thread with work and from other processes
   * (generation's short steps; extraction on shared cores, where spinning
   * cost a fifth of the CPU time).
   */
  spin?: boolean;
  /**
   * Outputs left on the device (WebGPU's GPU buffers) for the next run to read back in as inputs: a KV cache that
   * stays where it is computed between decoding steps. Ignored on the CPU and CUDA.
   */
  deviceOutputs?: readonly string[];
}

export const CUDA_HELP =
  "install onnxruntime-node's CUDA provider (CUDA 12 and cuDNN 9 on the machine, then: ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node)";

/** What the CUDA provider needs once its library is installed: what onnxruntime-node's CUDA 12 build loads, and a GPU. */
const CUDA_RUNTIME_HELP =
  "it needs CUDA 12 and cuDNN 9 libraries the dynamic loader finds (LD_LIBRARY_PATH) and an NVIDIA GPU this process " +
  "can see (nvidia-smi lists it; CUDA_VISIBLE_DEVICES does not hide it), or use --device cpu";

/** The file name of onnxruntime-node's CUDA provider library. */
export const CUDA_LIBRARY = "libonnxruntime_providers_cuda.so";

/** The folder of onnxruntime-node's binding for this platform, where its CUDA provider's library is installed. */
export function bindingFolder(): string {
  const root = dirname(dirname(createRequire(import.meta.url).resolve("onnxruntime-node")));
  return join(root, "bin", "napi-v6", process.platform, process.arch);
}

/** The path of onnxruntime-node's CUDA provider library in `folder` (its binding's); undefined where it is not there. */
export function cudaLibrary(folder: string = bindingFolder()): string | undefined {
  const name = existsSync(folder) ? readdirSync(folder).find((f) => f.startsWith(CUDA_LIBRARY)) : undefined;
  return name === undefined ? undefined : join(folder, name);
}

/** What WebGPU needs on Linux, for onnxruntime's provider and the `webgpu` package alike. */
export const VULKAN_HELP =
  "WebGPU runs over Vulkan on Linux: install a Vulkan driver for the GPU (NVIDIA's driver ships one; Mesa's for AMD and Intel)";

export const WEBGPU_HELP = `${VULKAN_HELP}, or use --device cpu`;

/** A one-node model: `y = op(x)`, x float32 `[1]`, y of `type`. */
function probeModel(op: "Identity" | "Cast", type: number): Uint8Array {
  return encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "probe",
      node: [
        { opType: op, input: ["x"], output: ["y"], attribute: op === "Cast" ? [{ name: "to", type: 2, i: type }] : [] },
      ],
      input: [valueInfo("x", DataType.FLOAT, [1])],
      output: [valueInfo("y", type, [1])],
    },
  });
}

/** What the WebGPU probe found: why the provider cannot be used (undefined: it can), and whether it runs float16. */
export interface WebgpuProbe {
  message: string | undefined;
  float16: boolean;
}

/** The start of a probe script: onnxruntime, quiet, and `models`, the one-node models given on stdin. */
const PROBE_PRELUDE =
  `const ort = require(${JSON.stringify(createRequire(import.meta.url).resolve("onnxruntime-node"))}); ort.env.logLevel = "fatal";` +
  `const models = require("fs").readFileSync(0, "utf8").split(" ").map((m) => Buffer.from(m, "base64"));` +
  `const open = (m, provider) => ort.InferenceSession.create(m, { executionProviders: [provider], logSeverityLevel: 4 });` +
  `const answer = (p) => p.then((a) => { process.stdout.write(a); process.exit(0); });`;

/**
 * How long a probe of an onnxruntime execution provider may take before it counts as hung: longer than other
 * probes, as a provider's first session starts its device (docs/extract.md states it).
 */
export const PROVIDER_PROBE_MS = 120_000;

/**
 * Runs a probe in a child process whose output is captured (providers and drivers print warnings of their own
 * straight to stderr): `body`, after {@link PROBE_PRELUDE}, answers `ok…` or `error:<onnxruntime's message>`. The
 * answer, or why the provider cannot be used: that message, or why the probe answered nothing.
 */
function probe(body: string, models: Uint8Array[]): { ok: string } | { message: string } {
  const r = spawnSync(process.execPath, ["-e", PROBE_PRELUDE + body], {
    input: models.map((m) => Buffer.from(m).toString("base64")).join(" "),
    encoding: "utf8",
    timeout: PROVIDER_PROBE_MS,
  });
  if (r.stdout?.startsWith("ok")) return { ok: r.stdout };
  if (r.stdout?.startsWith("error:")) return { message: r.stdout.slice("error:".length) };
  const why = r.error?.message ?? `exit status ${r.status ?? r.signal}`;
  return { message: `the probe ended without an answer (${why})` };
}

/**
 * Whether onnxruntime's WebGPU provider finds an adapter, and whether that
 * adapter runs float16 shaders (`shader-f16`: a float16 Cast runs), tried in a
 * child process ({@link probe}): Dawn and the Vulkan drivers print while they
 * look for one; the user sees only hsm's line.
 */
export function probeWebgpu(): WebgpuProbe {
  const r = probe(
    `const x = { x: new ort.Tensor("float32", Float32Array.of(1), [1]) };` +
      `answer(open(models[0], "webgpu").then(() => open(models[1], "webgpu").then((s) => s.run(x))` +
      `.then(() => "ok f16", () => "ok"), (e) => "error:" + e.message));`,
    [probeModel("Identity", DataType.FLOAT), probeModel("Cast", DataType.FLOAT16)],
  );
  return "ok" in r ? { message: undefined, float16: r.ok === "ok f16" } : { message: r.message, float16: false };
}

/**
 * Why onnxruntime's CUDA provider cannot be used here (its library missing, or CUDA, cuDNN or a GPU), or undefined
 * where a session opens on it; tried in a child process ({@link probe}) on a one-node model.
 */
function probeCuda(): string | undefined {
  const r = probe(`answer(open(models[0], "cuda").then(() => "ok", (e) => "error:" + e.message));`, [
    probeModel("Identity", DataType.FLOAT),
  ]);
  return "ok" in r ? undefined : r.message;
}

/** What {@link probeWebgpu} found, once per process. */
let webgpuProbe: WebgpuProbe | undefined;

/** What {@link probeCuda} found, once per process (null: the provider runs). */
let cudaProbe: string | null | undefined;

/** What a graph needs of a device beyond its operators: the graph's file, and what {@link checkDevice} looks at. */
export interface GraphNeeds {
  file: string;
  /**
   * Why the graph's GroupQueryAttention (onnxruntime-genai builds) cannot be written out in standard operators for
   * WebGPU (see onnx/gqa.ts); undefined where it can, or where there is none.
   */
  groupQueryAttention: string | undefined;
}

/**
 * Throws the {@link DeviceError} of a device that cannot run here (CUDA without its provider or a GPU, WebGPU
 * without an adapter), before any work;
 * with `graph`, also that of a GroupQueryAttention that cannot be written out in standard operators: its WebGPU
 * kernel (onnxruntime-node 1.30) gives states several percent away from the CPU kernel's, so WebGPU runs the
 * written-out form (see {@link forDevice}).
 */
export function checkDevice(device: Device, graph?: GraphNeeds): void {
  if (device === "cuda") {
    const message = (cudaProbe ??= probeCuda() ?? null);
    if (message !== null) throw deviceError(device, message)!;
  }
  if (device !== "webgpu") return;
  const found = (webgpuProbe ??= probeWebgpu());
  if (found.message !== undefined) throw deviceError(device, found.message)!;
  if (graph?.groupQueryAttention !== undefined) {
    throw new DeviceError(
      `${graph.file}: ${graph.groupQueryAttention}, and onnxruntime's WebGPU kernel of it does not compute what ` +
        `its CPU kernel computes; use --device cpu, or an optimum export of the model`,
    );
  }
}

/** What {@link checkDevice} looks at in the model read from `file`. */
export function graphNeeds(file: string, model: ModelProto): GraphNeeds {
  return { file, groupQueryAttention: groupQueryAttentionGap(model) };
}

/** The most bytes of weights a graph file may hold inline: protobuf's limit on one message, which onnxruntime keeps. */
const INLINE_LIMIT = 2 ** 31 - 1;

/**
 * Prepares a graph that {@link checkDevice} let through for `device`, in place: on WebGPU every GroupQueryAttention
 * is written out in standard operators that compute what the CPU kernel computes, and a float16 graph is widened
 * to float32 where the adapter lacks float16 shaders (`shader-f16`; onnxruntime would only fail at the first
 * float16 node). Returns the line telling the user that the graph was widened — its float16 inputs and outputs
 * are float32 then, and are fed and read so — or undefined where it runs as it is.
 */
export function forDevice(device: Device, file: string, model: ModelProto): string | undefined {
  if (device !== "webgpu") return undefined;
  decomposeGroupQueryAttention(model.graph!);
  if (!usesFloat16(model.graph!) || (webgpuProbe ??= probeWebgpu()).float16) return undefined;
  // The widened weights are held inline: counted before they are made.
  const bytes = (model.graph!.initializer ?? [])
    .filter((t) => t.dataType === DataType.FLOAT16)
    .reduce((sum, t) => sum + (t.dims ?? []).reduce((a: number, d) => a * num(d), 4), 0);
  if (bytes > INLINE_LIMIT) {
    throw new DeviceError(
      `${file}: the graph computes in float16, which this WebGPU adapter cannot (it lacks shader-f16), and widened ` +
        `to float32 its weights (${(bytes / 2 ** 30).toFixed(1)} GiB) pass the 2 GiB a graph may hold; ` +
        `use a float32 graph of the model (--model-file) or --device cpu`,
    );
  }
  widenFloat16(model, (t) => externalBytes(dirname(file), t));
  return `${file}: the graph computes in float16 and this WebGPU adapter lacks shader-f16: it runs widened to float32`;
}

/** The bytes of float16 initializer `t` in its external-data file, which lies in the model's folder `dir`. */
function externalBytes(dir: string, t: TensorProto): Uint8Array {
  const bytes = (t.dims ?? []).reduce((a: number, d) => a * num(d), 2);
  const { path, offset } = externalFile(t, dir, bytes);
  return readInputSync(path, { follow: true }, { offset, length: bytes });
}

/** "no WebGPU adapter was found (…)" where onnxruntime's WebGPU provider failed with `message` for want of one. */
export function missingAdapter(message: string): string | undefined {
  const adapter = /Failed to get a WebGPU adapter: ([^\n]*)/.exec(message);
  return adapter ? `no WebGPU adapter was found (${adapter[1]!.trim()})` : undefined;
}

/**
 * The error for a device whose provider failed with `message`; undefined for the CPU. For CUDA the advice follows
 * the cause: without the provider's library (`library`, the path {@link cudaLibrary} found, or undefined) it says
 * how to install it; with it, what else it needs (CUDA 12, cuDNN 9, a GPU).
 */
export function deviceError(
  device: Device,
  message: string,
  library: string | undefined = device === "cuda" ? cudaLibrary() : undefined,
): DeviceError | undefined {
  const first = message.split("\n")[0]!;
  if (device === "cuda") {
    const why = `the CUDA execution provider could not be used (${first})`;
    return new DeviceError(
      library === undefined
        ? `${why}; ${CUDA_HELP}`
        : `${why}: its library ${library} is installed, so ${CUDA_RUNTIME_HELP}`,
    );
  }
  if (device === "webgpu") {
    const why = missingAdapter(message) ?? `the WebGPU execution provider could not be used (${first})`;
    return new DeviceError(`--device webgpu: ${why}; ${WEBGPU_HELP}`);
  }
  return undefined;
}

/**
 * The error of a graph that loaded and then failed to run: onnxruntime's kernel of one of the graph's own nodes
 * refused it (a limit of the kernel, such as GroupQueryAttention's head size on the CPU, or an operator or type a
 * GPU provider cannot run on this adapter). On a GPU device a {@link DeviceError} that points to the CPU; on the
 * CPU a {@link ModelDirError} naming the graph file, unless the node is one hsm added (named `/hsm/…`): that
 * failure is hsm's own. Undefined for errors that are not onnxruntime's.
 */
export function runError(device: Device, file: string, err: unknown): HsmError | undefined {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof HsmError || !/^Non-zero status code returned/.test(message)) return undefined;
  const first = message.split("\n")[0]!;
  if (device === "cpu") {
    return / Name:'\/hsm\//.test(first)
      ? undefined
      : new ModelDirError(file, `onnxruntime could not run the graph (${first})`);
  }
  const provider = device === "cuda" ? "CUDA" : "WebGPU";
  return new DeviceError(
    `${file}: onnxruntime's ${provider} execution provider could not run the graph (${first}); use --device cpu`,
  );
}

/** Where a rewritten model is loaded from, and the name it gives the original file. */
export interface Stage {
  dir: string;
  /** The original model file as the rewritten graph names it in external-data locations. */
  sourceName: string;
  /** The rewritten graph's file in `dir`; undefined where it is loaded from memory, its weights read from `dir`. */
  modelFile: string | undefined;
  cleanup(): Promise<void>;
}

/** A model for onnxruntime: a file, bytes with every weight inline, or bytes whose external data lies in `folder`. */
export type ModelSource = string | Uint8Array | { bytes: Uint8Array; folder: string };

/**
 * Prepares a folder to load a rewritten model of `graph`, read from `onnxPath`, from; undefined when weights must be
 * inlined. The folder holds the graph's file and exactly the files its initializers keep external data in, at the
 * same paths relative to it (subfolders too), whatever they are named. They are hard-linked by what they are, not by
 * the links that name them: a Hugging Face cache's `snapshots/<rev>/model.onnx_data` is a symbolic link into
 * `../../blobs/`, which onnxruntime would refuse as external data leaving the model's folder. The private folder is
 * tried in the temporary directory, then beside the graph's own file (a cache's `blobs/`, on the same file system),
 * and only where no file is a link is the rewritten model put in the model folder itself, or, where that folder is
 * read-only (a shared model folder on a file system of its own), loaded from memory with its weights read from
 * there. A weight file missing or shorter than its initializers say is refused first ({@link checkExternalData}).
 */
export async function stageModel(onnxPath: string, graph: GraphProto): Promise<Stage | undefined> {
  const modelDir = dirname(onnxPath);
  // A missing or cut weight file is named here, not in onnxruntime's words about the staging folder.
  await checkExternalData(graph, modelDir);
  const names = externalDataFiles(graph, modelDir);
  const real = await realpath(onnxPath);
  const realData = await Promise.all(
    names.map((name) =>
      realpath(join(modelDir, name)).catch(() => {
        throw new ModelDirError(join(modelDir, name), "does not exist, but the graph keeps weights there");
      }),
    ),
  );
  for (const parent of [...new Set([tmpdir(), dirname(real)])]) {
    const temp = await mkdtemp(join(parent, ".hsm-model-")).catch(() => undefined);
    if (temp === undefined) continue;
    // A job stopped while its session loads (Ctrl-C, a scheduler's SIGTERM) leaves no links to the weights behind.
    const forget = onStopSignal(() => rmSync(temp, { recursive: true, force: true }));
    try {
      await link(real, join(temp, "hsm-source-model.onnx"));
      for (const [k, name] of names.entries()) {
        await mkdir(dirname(join(temp, name)), { recursive: true });
        await link(realData[k]!, join(temp, name));
      }
      return {
        dir: temp,
        sourceName: "hsm-source-model.onnx",
        modelFile: "hsm-rewritten.onnx",
        cleanup: async () => {
          forget();
          await rm(temp, { recursive: true, force: true });
        },
      };
    } catch {
      forget();
      await rm(temp, { recursive: true, force: true });
    }
  }
  const realDir = await realpath(modelDir);
  const linked = [real, ...realData].some((r, k) => r !== join(realDir, k === 0 ? basename(onnxPath) : names[k - 1]!));
  try {
    if (linked) throw new Error("the model's files are links");
    await access(modelDir, constants.W_OK);
    const modelFile = `.hsm-rewritten-${process.pid}.onnx`;
    const forget = onStopSignal(() => rmSync(join(modelDir, modelFile), { force: true }));
    return {
      dir: modelDir,
      sourceName: basename(onnxPath),
      modelFile,
      cleanup: async () => {
        forget();
        await unlink(join(modelDir, modelFile)).catch(() => {});
      },
    };
  } catch {
    if (names.length > 0 && !linked) {
      return { dir: modelDir, sourceName: basename(onnxPath), modelFile: undefined, cleanup: async () => {} };
    }
    if (names.length > 0) {
      throw new ModelDirError(
        modelDir,
        `a model with external weight files needs a writable folder on the same file system as ${tmpdir()} or the model's files`,
      );
    }
    return undefined;
  }
}

/** Opens a session over model bytes, staged as {@link stageModel} decided (inline when `stage` is undefined). */
export async function createSession(
  graphFile: string,
  bytes: Uint8Array,
  stage: Stage | undefined,
  options: SessionOptions = {},
): Promise<ort.InferenceSession> {
  return withStagedModel(graphFile, bytes, stage, options.device ?? "cpu", (model) => loadSession(model, options));
}

/**
 * Runs `load` on the model as {@link stageModel} decided — the staged file's
 * path, or the bytes themselves when `stage` is undefined — and removes the
 * stage afterwards, whatever happened. A device onnxruntime cannot use here
 * fails first, before anything is written. A model onnxruntime refuses is
 * named by `graphFile`, the user's graph the bytes were rewritten from.
 */
export async function withStagedModel<T>(
  graphFile: string,
  bytes: Uint8Array,
  stage: Stage | undefined,
  device: Device,
  load: (model: ModelSource) => Promise<T>,
): Promise<T> {
  try {
    checkDevice(device);
    if (!stage) return await load(bytes);
    if (stage.modelFile === undefined) return await load({ bytes, folder: stage.dir });
    await writeFile(join(stage.dir, stage.modelFile), bytes);
    return await load(join(stage.dir, stage.modelFile));
  } catch (err) {
    throw err instanceof ModelLoadError ? new ModelLoadError(err.reason, graphFile) : err;
  } finally {
    await stage?.cleanup();
  }
}

/** onnxruntime's options for {@link SessionOptions}; `weights`, the folder of the external data of a model in memory. */
function ortOptions(options: SessionOptions, weights?: string): ort.InferenceSession.SessionOptions {
  const session = {
    ...(options.spin === false ? { intra_op: { allow_spinning: "0" } } : {}),
    ...(weights !== undefined ? { model_external_initializers_file_folder_path: weights } : {}),
  };
  return {
    executionProviders: [options.device ?? "cpu"],
    graphOptimizationLevel: "all",
    logSeverityLevel: 4,
    intraOpNumThreads: options.threads ?? computeCores(),
    interOpNumThreads: 1,
    ...(Object.keys(session).length > 0 ? { extra: { session } } : {}),
    ...(options.device === "webgpu" && options.deviceOutputs?.length
      ? { preferredOutputLocation: Object.fromEntries(options.deviceOutputs.map((n) => [n, "gpu-buffer" as const])) }
      : {}),
  };
}

/**
 * A session over a model file or its bytes; what onnxruntime fails with becomes the {@link DeviceError} of a
 * provider that cannot run here, or else a {@link ModelLoadError}.
 */
export async function loadSession(model: ModelSource, options: SessionOptions): Promise<ort.InferenceSession> {
  const device = options.device ?? "cpu";
  try {
    if (typeof model === "string") return await ort.InferenceSession.create(model, ortOptions(options));
    if (model instanceof Uint8Array) return await ort.InferenceSession.create(model, ortOptions(options));
    return await ort.InferenceSession.create(model.bytes, ortOptions(options, model.folder));
  } catch (err) {
    const message = (err as Error).message;
    // onnxruntime names the file it was given: a staged copy of the graph, gone once the error reaches the user.
    const reason = message.split("\n")[0]!.replace(/^Load model from .*? failed: ?/, "");
    throw (device === "cpu" ? undefined : providerError(device)) ?? new ModelLoadError(reason);
  }
}

/**
 * The {@link DeviceError} of a GPU device whose provider cannot run here (see {@link checkDevice}); undefined where
 * it runs the one-node probe, so that a graph it then refuses is the graph's problem, not the device's.
 */
function providerError(device: Device): DeviceError | undefined {
  try {
    checkDevice(device);
    return undefined;
  } catch (err) {
    if (err instanceof DeviceError) return err;
    throw err;
  }
}
