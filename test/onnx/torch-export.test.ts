/**
 * Graphs exported by hand with torch.onnx.export, without a KV cache (logits
 * only; int64 input_ids, attention_mask and, where the family takes them,
 * position_ids), one for each family make-model writes, from modules written
 * as transformers writes them (test/helpers/torch_export.py says how each
 * differs): Llama with grouped-query and multi-query attention and its
 * relatives (Mistral's and Phi-3's sliding windows, Qwen2's biases, OLMo's
 * layer norms without weights, Starcoder2, a mixture of experts, Phi-3's fused
 * projections and long-RoPE tables computed from position_ids, StableLM's and
 * Phi's partial rotary embeddings, Gemma 2's soft-capped scores and window), GPT-2 and
 * GPT-Neo (learned positions, causal buffers sliced at the keys' length),
 * GPT-J and CodeGen (interleaved rotary embeddings gathered from one table),
 * Falcon-7B and GPT-BigCode (one key/value head), MPT (ALiBi sliced by the
 * keys' length), BLOOM, OPT and GPT-NeoX (batch and heads merged into one
 * axis for bmm), and Qwen3 and Gemma 3 (an RMSNorm on each head's queries and
 * keys, heads wider than hidden/heads; Gemma 3's local and global layers with
 * their own rotary bases). Generation adds a cache, uses it, and writes the
 * greedy text of the same PyTorch module run in float64; for Qwen3 and Gemma 3
 * extraction stores the module's float64 hidden states (HuggingFace's
 * numbering) within float16 storage. Skipped where PyTorch is not installed,
 * unless HSM_REQUIRE_TORCH=1 (as in CI), where that fails.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { PYTHON } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";
import { STORED_VS_REFERENCE } from "../tolerances.js";

const hasTorch = spawnSync(PYTHON, ["-c", "import torch, onnx"], { stdio: "ignore" }).status === 0;
if (process.env.HSM_REQUIRE_TORCH === "1" && !hasTorch)
  throw new Error(
    `HSM_REQUIRE_TORCH=1 but ${PYTHON} cannot import torch and onnx (apt-get install python3-torch python3-onnx)`,
  );
const script = join(import.meta.dirname, "..", "helpers", "torch_export.py");
const dir = tempDir("hsm-torch-export-");
const bank = join(dir, "bank.jsonl");
const MAX_NEW = 8;
const EOS = 1025;
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
  "Who wrote Don Quixote?",
  "¿Cuál es la capital de Perú?",
];
const rows = QUERIES.map((query, i) => ({
  query_id: `q${i}`,
  fact_id: `f${i}`,
  condition_family: "anchor",
  query,
  use_for_main_forward: true,
  answers: ["x"],
}));
/**
 * Qwen3's and Gemma 3's config.json: make-model's qwen2 and gemma (Gemma 2) configs with these fields replaced.
 * Both have heads of 16 features where hidden/heads is 8, as Qwen3-0.6B's 16 heads of 128 read a hidden size of
 * 1,024. Gemma 3's window of 4 tokens is shorter than every prompt, and its pattern of 2 makes layers 0 and 2
 * local, layer 1 global.
 */
const QWEN3 = { architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", head_dim: 16, rms_norm_eps: 1e-6 };
const GEMMA3 = {
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
};
/** The module, and the make-model folder whose config.json (with `config`'s fields replaced) and tokenizer it takes. */
const MODELS = {
  "llama-gqa": { module: "llama", family: "llama", kvHeads: 2, seed: 7 },
  "llama-mqa": { module: "llama", family: "llama", kvHeads: 1, seed: 9 },
  gpt2: { module: "gpt2", family: "gpt2", kvHeads: undefined, seed: 8 },
  bloom: { module: "bloom", family: "bloom", kvHeads: undefined, seed: 10 },
  opt: { module: "opt", family: "opt", kvHeads: undefined, seed: 11 },
  neox: { module: "neox", family: "neox", kvHeads: 4, seed: 12 },
  gptj: { module: "gptj", family: "gptj", kvHeads: undefined, seed: 13 },
  falcon: { module: "falcon", family: "falcon", kvHeads: undefined, seed: 14 },
  gpt_bigcode: { module: "gpt_bigcode", family: "gpt_bigcode", kvHeads: undefined, seed: 15 },
  mistral: { module: "mistral", family: "mistral", kvHeads: 2, seed: 16 },
  qwen2: { module: "qwen2", family: "qwen2", kvHeads: 2, seed: 17 },
  olmo: { module: "olmo", family: "olmo", kvHeads: 2, seed: 18 },
  starcoder2: { module: "starcoder2", family: "starcoder2", kvHeads: 2, seed: 19 },
  mixtral: { module: "mixtral", family: "mixtral", kvHeads: 2, seed: 20 },
  phi3: { module: "phi3", family: "phi3", kvHeads: 2, seed: 21 },
  stablelm: { module: "stablelm", family: "stablelm", kvHeads: undefined, seed: 22 },
  phi: { module: "phi", family: "phi", kvHeads: undefined, seed: 23 },
  // A window shorter than every prompt: the added cache must keep it (a `tril` of the 4-D mask).
  gemma: { module: "gemma", family: "gemma", kvHeads: 2, seed: 24, config: { sliding_window: 4 } },
  codegen: { module: "codegen", family: "codegen", kvHeads: undefined, seed: 25 },
  gpt_neo: { module: "gpt_neo", family: "gpt_neo", kvHeads: undefined, seed: 26 },
  mpt: { module: "mpt", family: "mpt", kvHeads: undefined, seed: 27 },
  qwen3: { module: "qwen3", family: "qwen2", kvHeads: 2, seed: 28, config: QWEN3 },
  gemma3_text: { module: "gemma3_text", family: "gemma", kvHeads: 2, seed: 29, config: GEMMA3 },
} as const;
type Name = keyof typeof MODELS;

function torch(...args: string[]): string {
  const r = spawnSync(PYTHON, [script, ...args], { encoding: "utf8", maxBuffer: 16 << 20 });
  if (r.status !== 0) throw new Error(`torch_export.py ${args[0]} failed: ${r.stderr.slice(-2000)}`);
  return r.stdout;
}

/** Writes `name`'s model folder: make-model's config.json and tokenizer, the module's torch.onnx.export graph. */
async function exportModel(name: Name, md: string, layers: number): Promise<PromptTokenizer> {
  const m = MODELS[name];
  await writeModelInStyle(md, "plain", {
    family: m.family,
    layers,
    hidden: 32,
    heads: 4,
    ...(m.kvHeads ? { kvHeads: m.kvHeads } : {}),
    tokenizer: "llama3.1-1k",
  });
  rmSync(join(md, "model.onnx"));
  if ("config" in m) {
    const config = join(md, "config.json");
    writeFileSync(config, JSON.stringify({ ...JSON.parse(readFileSync(config, "utf8")), ...m.config }, null, 2));
  }
  torch("export", m.module, md, String(m.seed));
  return PromptTokenizer.load(md);
}

beforeAll(() => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
});

describe.skipIf(!hasTorch)("a torch.onnx.export graph without a KV cache", () => {
  it.each(Object.keys(MODELS) as Name[])(
    "%s: generation adds a cache, uses it, and writes the float64 module's greedy text at batch 8 and 1",
    async (name) => {
      const m = MODELS[name];
      const md = join(dir, name);
      const tok = await exportModel(name, md, 2);
      const ids = join(dir, `${name}.ids.json`);
      writeFileSync(ids, JSON.stringify(rows.map((r) => tok.encode(buildPrompt(r)))));
      const greedy = JSON.parse(torch("greedy", m.module, md, String(m.seed), ids, String(MAX_NEW), String(EOS)));
      const want = Object.fromEntries(
        (greedy as number[][]).map((g, i) => [`q${i}`, tok.decode(g.filter((t) => t !== EOS))]),
      );
      for (const batchSize of [8, 1]) {
        const out = join(dir, `${name}-b${batchSize}.jsonl`);
        const messages: string[] = [];
        await generate({
          modelDir: md,
          bank,
          out,
          batchSize,
          maxNewTokens: MAX_NEW,
          selfCheck: 0,
          log: (msg) => messages.push(msg),
        });
        expect(messages).toContain("the model has no KV cache: decoding with one added to the graph");
        const got = readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l));
        expect(Object.fromEntries(got.map((r) => [r.query_id, r.raw_response]))).toEqual(want);
      }
    },
  );
});

describe.skipIf(!hasTorch)("a torch.onnx.export graph with an RMSNorm on each head's queries and keys", () => {
  it.each(["qwen3", "gemma3_text"] as const)(
    "%s: extraction stores each block's float64 output, the last one's after the final norm",
    async (name) => {
      const m = MODELS[name];
      const md = join(dir, `${name}-states`);
      const tok = await exportModel(name, md, 3);
      const ids = join(dir, `${name}.states-ids.json`);
      writeFileSync(ids, JSON.stringify(rows.map((r) => tok.encode(buildPrompt(r)))));
      const want = JSON.parse(torch("states", m.module, md, String(m.seed), ids)) as number[][][];
      const store = join(dir, `${name}.store`);
      await extract({ modelDir: md, bank, out: store, batchSize: 2, layerRule: "l >= 0" });
      const reader = await StoreReader.open(store);
      expect(reader.manifest.layers).toEqual([0, 1, 2]);
      for (const layer of reader.manifest.layers) {
        for (let i = 0; i < rows.length; i++) {
          const got = await reader.readRowsF32(layer, i, 1);
          expect(got.length).toBe(32);
          want[i]![layer]!.forEach((w, j) => {
            const { relative, absolute } = STORED_VS_REFERENCE;
            expect(Math.abs(got[j]! - w), `layer ${layer} row ${i} feature ${j}`).toBeLessThanOrEqual(
              relative * Math.abs(w) + absolute,
            );
          });
        }
      }
      await reader.close();
    },
  );
});
