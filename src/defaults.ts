/**
 * Every default value of the library, defined once. The CLI's `--help` shows
 * these; library functions fall back to them; nothing else repeats a literal.
 */
import { basename, resolve } from "node:path";

/** docs/formats.md#layer-selection: store every block `l` with `l/(L−1) ≥ 0.4`. */
export const DEFAULT_LAYER_RULE = "l/(L-1) >= 0.4";
/** docs/formats.md#prompts: prompts longer than this lose tokens from the left. */
export const MAX_PROMPT_LEN = 192;
/** docs/formats.md#decoding: greedy decoding stops after this many new tokens. */
export const MAX_NEW_TOKENS = 24;
/** The most new tokens `--max-new-tokens` takes: beyond any prompt-and-answer context, a run would only exhaust memory. */
export const MAX_NEW_TOKENS_LIMIT = 65_536;
/** The most intra-op threads `--threads` takes. */
export const MAX_THREADS = 4096;
/** Prompts per forward pass in `extract` and `generate`. */
export const DEFAULT_BATCH_SIZE = 16;
/** Rows per durable commit (and shard boundary) of an extraction. */
export const DEFAULT_COMMIT_ROWS = 1024;
/** Rows of an extraction re-run alone at batch 1 to check the batched states (0: no check). */
export const DEFAULT_SELF_CHECK_ROWS = 32;
/** Rows of a generation regenerated alone at batch 1 to check the batched texts (0: no check). */
export const DEFAULT_GENERATE_CHECK_ROWS = 16;
/**
 * Batches `hsm extract` and `hsm generate` run at once on the CPU, each in a
 * worker thread with a session (and a copy of the weights) of its own: a
 * small batch's matrix products keep one core busier than they keep two.
 */
export const DEFAULT_CPU_WORKERS = 2;
/** Where onnxruntime runs. */
export const DEFAULT_DEVICE = "cpu";

/** docs/metrics.md#kts-definition: the KTS probe's inverse L2 strength. */
export const DEFAULT_PROBE_C = 0.01;
/** docs/metrics.md#kts-definition: KTS folds over facts. */
export const DEFAULT_FOLDS = 5;
/** The most KTS folds `--folds` takes (more than any store has facts). */
export const MAX_FOLDS = 100_000;
/** docs/metrics.md#bootstrap-definition: bootstrap replicates per interval. */
export const DEFAULT_BOOTSTRAP = 1000;
/** The most bootstrap replicates `--bootstrap` takes. */
export const MAX_BOOTSTRAP = 1_000_000;
/** docs/metrics.md#bootstrap-definition: the bootstrap seed (also the fixture generator's). */
export const DEFAULT_SEED = 20260101;
/** The largest seed: the generators take 32 bits, so a larger one would wrap onto a smaller one's draws. */
export const MAX_SEED = 0xffffffff;
/** The metrics backend chosen when none is named. */
export const DEFAULT_BACKEND = "auto";

/** `hsm run`'s output root. */
export const DEFAULT_OUTPUTS = "outputs";
/** `hsm demo`'s output folder. */
export const DEFAULT_DEMO_OUT = "hsm-demo";

/**
 * The model name recorded in outputs when none is given: the model folder's own name (a hub id's NAME); a path
 * ending in `.` or `..` names the folder it resolves to.
 */
export function defaultModelName(modelDir: string): string {
  const path = modelDir.startsWith("hf:") ? modelDir.slice(3).replace(/@.*$/, "") : modelDir;
  const trimmed = path.replace(/[\\/]+$/, "");
  const last = trimmed.slice(Math.max(trimmed.lastIndexOf("/"), trimmed.lastIndexOf("\\")) + 1) || trimmed;
  return last === "." || last === ".." ? basename(resolve(path)) || last : last;
}

/** The name outputs record for a model, developer or organization that neither the command line nor the input names. */
export const UNNAMED = "unknown";

/** Where onnxruntime can run: the closed set `--device` accepts. */
export const DEVICES = ["cpu", "cuda", "webgpu"] as const;

/** `hsm make-model`'s geometry when a flag is not given (`kvHeads`: half the heads, `intermediate`: twice the width). */
export const DEFAULT_TINY_MODEL = { layers: 4, hidden: 64, heads: 4, tokenizer: "llama3.1", seed: 1234 } as const;
