/**
 * What the torch.onnx.export tests share: whether PyTorch is installed (with HSM_REQUIRE_TORCH=1, as in CI, its
 * absence fails), torch_export.py's commands, the model folders its modules are exported into, and the config.json
 * of the families make-model does not write.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { expect } from "vitest";

import { generate } from "../../src/generate/generate.js";
import type { PromptTokenizer } from "../../src/model/tokenizer.js";
import type { StoreReader } from "../../src/store/reader.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import type { TinyModelOptions } from "../../src/synthetic/llama.js";
import { STORED_VS_REFERENCE } from "../tolerances.js";
import { PYTHON } from "./numpy.js";

export const hasTorch = spawnSync(PYTHON, ["-c", "import torch, onnx"], { stdio: "ignore" }).status === 0;
if (process.env.HSM_REQUIRE_TORCH === "1" && !hasTorch)
  throw new Error(
    `HSM_REQUIRE_TORCH=1 but ${PYTHON} cannot import torch and onnx (apt-get install python3-torch python3-onnx)`,
  );

const script = join(import.meta.dirname, "torch_export.py");

/** Runs `torch_export.py ARGS…` and returns what it printed; its error's end where it fails. */
export function torchExport(...args: string[]): string {
  return torchExportWith(script, ...args);
}

/** Runs `SCRIPT ARGS…`, a copy of torch_export.py with more modules (a walk's), as {@link torchExport} runs it. */
export function torchExportWith(file: string, ...args: string[]): string {
  const r = spawnSync(PYTHON, [file, ...args], { encoding: "utf8", maxBuffer: 16 << 20 });
  if (r.status !== 0) throw new Error(`torch_export.py ${args[0]} failed: ${r.stderr.slice(-2000)}`);
  return r.stdout;
}

/** Bank rows of `queries`, each the anchor of its own fact, all in the main forward pass. */
export const anchorRows = (queries: readonly string[]) =>
  queries.map((query, i) => ({
    query_id: `q${i}`,
    fact_id: `f${i}`,
    condition_family: "anchor",
    query,
    use_for_main_forward: true,
    answers: ["x"],
  }));

/**
 * How far a store's rows lie from the module's states `want[row][layer]` (torch_export.py's `states`), over every
 * stored layer, in units of the float16 storage bound: at most 1 where every value agrees.
 */
export async function worstAgainstStates(reader: StoreReader, want: number[][][]): Promise<number> {
  let worst = 0;
  for (const layer of reader.manifest.layers) {
    for (let i = 0; i < want.length; i++) {
      const got = await reader.readRowsF32(layer, i, 1);
      want[i]![layer]!.forEach((w, j) => {
        const allowed = STORED_VS_REFERENCE.relative * Math.abs(w) + STORED_VS_REFERENCE.absolute;
        worst = Math.max(worst, Math.abs(got[j]! - w) / allowed);
      });
    }
  }
  return worst;
}

/**
 * Generates `bank` from the no-cache graph in `md` at batch 8 and 1 (into `out`-b8.jsonl, `out`-b1.jsonl), and
 * expects a cache added and every row's text to be the module's greedy ids (torch_export.py's `greedy`), decoded by
 * `tok` without `eos`.
 */
export async function expectModuleGreedy(
  md: string,
  bank: string,
  out: string,
  tok: PromptTokenizer,
  greedy: number[][],
  eos: number,
  maxNewTokens: number,
): Promise<void> {
  const want = Object.fromEntries(greedy.map((g, i) => [`q${i}`, tok.decode(g.filter((t) => t !== eos))]));
  for (const batchSize of [8, 1]) {
    const file = `${out}-b${batchSize}.jsonl`;
    const messages: string[] = [];
    await generate({
      modelDir: md,
      bank,
      out: file,
      batchSize,
      maxNewTokens,
      selfCheck: 0,
      log: (m) => messages.push(m),
    });
    expect(messages).toContain("the model has no KV cache: decoding with one added to the graph");
    const got = readFileSync(file, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { query_id: string; raw_response: string });
    expect(Object.fromEntries(got.map((r) => [r.query_id, r.raw_response]))).toEqual(want);
  }
}

/** A module of torch_export.py and the make-model family whose folder (tokenizer, sizes, config.json) it takes. */
export interface TorchModule {
  module: string;
  family: NonNullable<TinyModelOptions["family"]>;
  kvHeads?: number | undefined;
  seed: number;
  /** Fields put over the folder's config.json, after TORCH_CONFIGS' for the module; one set to undefined is dropped. */
  config?: Record<string, unknown>;
  /** The torch_export.py that holds the module: a walk's copy (test/helpers/walks.ts); this folder's by default. */
  script?: string;
}

/**
 * Writes a model folder at `md`: make-model's config.json (rewritten by TORCH_CONFIGS for the families make-model
 * does not write, then with `config`'s fields) and tokenizer, and the module's torch.onnx.export graph at `opset`.
 */
export async function exportTorchModel(md: string, m: TorchModule, layers: number, opset?: number): Promise<void> {
  await writeModelInStyle(md, "plain", {
    family: m.family,
    layers,
    hidden: 32,
    heads: 4,
    ...(m.kvHeads ? { kvHeads: m.kvHeads } : {}),
    tokenizer: "llama3.1-1k",
  });
  rmSync(join(md, "model.onnx"));
  if (m.module in TORCH_CONFIGS) writeTorchConfig(md, m.module as keyof typeof TORCH_CONFIGS);
  if (m.config) {
    const config = join(md, "config.json");
    writeFileSync(config, JSON.stringify({ ...JSON.parse(readFileSync(config, "utf8")), ...m.config }, null, 2));
  }
  const args = ["export", m.module, md, String(m.seed), ...(opset === undefined ? [] : [String(opset)])];
  torchExportWith(m.script ?? script, ...args);
}

/**
 * config.json of the torch_export.py families that make-model does not write: the folder of the make-model family
 * they start from (its tokenizer and sizes: Llama's, Qwen2's for Qwen3, Gemma 2's for Gemma 3) with the
 * architecture, model_type and fields transformers' config of the family adds.
 */
const TORCH_CONFIGS = {
  olmo2: { architectures: ["Olmo2ForCausalLM"], model_type: "olmo2", attention_bias: false },
  // Granite 3.0's multipliers, attention_multiplier 1/head_dim as there (the tests' 32 wide, 4 heads).
  granite: {
    architectures: ["GraniteForCausalLM"],
    model_type: "granite",
    embedding_multiplier: 12.0,
    attention_multiplier: 0.125,
    residual_multiplier: 0.22,
    logits_scaling: 8.0,
  },
  cohere: {
    architectures: ["CohereForCausalLM"],
    model_type: "cohere",
    layer_norm_eps: 1e-5,
    logit_scale: 0.0625,
    use_qk_norm: false,
    tie_word_embeddings: true,
  },
  // Heads of 16 features where hidden/heads is 8, as Qwen3-0.6B's 16 heads of 128 read a hidden size of 1,024.
  qwen3: { architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", head_dim: 16, rms_norm_eps: 1e-6 },
  // A window of 4 tokens, shorter than every prompt; a pattern of 2 makes layers 0 and 2 local, layer 1 global.
  gemma3_text: {
    architectures: ["Gemma3ForCausalLM"],
    model_type: "gemma3_text",
    head_dim: 16,
    rms_norm_eps: 1e-6,
    query_pre_attn_scalar: 12,
    attn_logit_softcapping: null,
    final_logit_softcapping: null,
    sliding_window: 4,
    sliding_window_pattern: 2,
    rope_theta: 1e6,
    rope_local_base_freq: 1e4,
    tie_word_embeddings: true,
  },
} as const;

/** Rewrites `dir`'s config.json (make-model's, of the family `family` starts from) as `family`'s. */
function writeTorchConfig(dir: string, family: keyof typeof TORCH_CONFIGS): void {
  const path = join(dir, "config.json");
  const config = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  writeFileSync(path, JSON.stringify({ ...config, ...TORCH_CONFIGS[family] }, null, 2) + "\n");
}
