/**
 * Graphs exported by hand with torch.onnx.export, without a KV cache (logits
 * only; int64 input_ids, attention_mask and, where the family takes them,
 * position_ids), one for each family make-model writes and for OLMo 2,
 * Granite, Cohere, Qwen3 and Gemma 3 (a make-model folder with their
 * config.json, test/helpers/torch-export.ts), from modules written as
 * transformers writes them (test/helpers/torch_export.py says how each
 * differs): Llama with grouped-query and multi-query attention and its
 * relatives (Mistral's and Phi-3's sliding windows, Qwen2's biases, OLMo's
 * layer norms without weights, Starcoder2, a mixture of experts, Phi-3's fused
 * projections and long-RoPE tables computed from position_ids, StableLM's and
 * Phi's partial rotary embeddings, Gemma 2's soft-capped scores and window,
 * OLMo 2's post-norms and q/k norms, Granite's multipliers, Cohere's parallel
 * block on a written-out LayerNorm and interleaved rotary, Qwen3's and Gemma
 * 3's RMSNorm on each head's queries and keys with heads wider than
 * hidden/heads, Gemma 3's local and global layers with their own rotary
 * bases), GPT-2 and GPT-Neo (learned positions, causal buffers sliced at the
 * keys' length), GPT-J and CodeGen (interleaved rotary embeddings gathered
 * from one table), Falcon-7B and GPT-BigCode (one key/value head), MPT (ALiBi
 * sliced by the keys' length), BLOOM, OPT and GPT-NeoX (batch and heads merged
 * into one axis for bmm). Generation adds a cache, uses it, and writes the
 * greedy text of the same PyTorch module run in float64. Skipped where PyTorch
 * is not installed, unless HSM_REQUIRE_TORCH=1 (as in CI), where that fails.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { tempDir } from "../helpers/tmp.js";
import {
  anchorRows,
  expectModuleGreedy,
  exportTorchModel,
  hasTorch,
  torchExport,
  type TorchModule,
} from "../helpers/torch-export.js";

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
const rows = anchorRows(QUERIES);
/**
/**
 * The module, and the make-model folder whose config.json (test/helpers/torch-export.ts rewrites it for the
 * families make-model does not write, then puts `config`'s fields over it) and tokenizer it takes.
 */
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
  olmo2: { module: "olmo2", family: "llama", kvHeads: 2, seed: 28 },
  granite: { module: "granite", family: "llama", kvHeads: 2, seed: 29 },
  cohere: { module: "cohere", family: "llama", kvHeads: 2, seed: 30 },
  qwen3: { module: "qwen3", family: "qwen2", kvHeads: 2, seed: 31 },
  gemma3_text: { module: "gemma3_text", family: "gemma", kvHeads: 2, seed: 32 },
} as const satisfies Record<string, TorchModule>;
type Name = keyof typeof MODELS;

beforeAll(() => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
});

describe.skipIf(!hasTorch)("a torch.onnx.export graph without a KV cache", () => {
  it.each(Object.keys(MODELS) as Name[])(
    "%s: generation adds a cache, uses it, and writes the float64 module's greedy text at batch 8 and 1",
    async (name) => {
      const m = MODELS[name];
      const md = join(dir, name);
      await exportTorchModel(md, m, 2);
      const tok = await PromptTokenizer.load(md);
      const ids = join(dir, `${name}.ids.json`);
      writeFileSync(ids, JSON.stringify(rows.map((r) => tok.encode(buildPrompt(r)))));
      const greedy = JSON.parse(
        torchExport("greedy", m.module, md, String(m.seed), ids, String(MAX_NEW), String(EOS)),
      ) as number[][];
      await expectModuleGreedy(md, bank, join(dir, name), tok, greedy, EOS, MAX_NEW);
    },
  );
});
