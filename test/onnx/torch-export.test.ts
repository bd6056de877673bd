/**
 * Graphs exported by hand with torch.onnx.export, without a KV cache (logits
 * only; int64 input_ids, attention_mask and position_ids): a Llama as
 * transformers 4.36 writes it (rotary tables sliced to the keys' length and
 * indexed by position_ids, the causal mask from torch.arange over the query
 * length, grouped-query and multi-query attention) and a GPT-2 (learned
 * positions, fused QKV split in three, the causal buffer sliced at the keys'
 * length), a GPT-J (interleaved rotary embeddings on part of each head, sin
 * and cos gathered from one table), a Falcon-7B (one key/value head cut from
 * the fused projection by a list index and broadcast against the queries),
 * a multi-query GPT-BigCode (keys `[B, S, hd]` whose length the graph reads
 * after their transpose), and three that merge batch and heads into one axis for bmm: BLOOM
 * (ALiBi from the mask's cumulative sum), OPT (positions counted over the
 * mask) and GPT-NeoX (rotary embeddings on part of each head, the keys'
 * length read before they are split and joined). Generation adds a cache, uses it, and writes the greedy text of
 * the same PyTorch module run in float64 (test/helpers/torch_export.py). Skipped
 * where PyTorch is not installed, unless HSM_REQUIRE_TORCH=1 (as in CI), where that fails.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { generate } from "../../src/generate/generate.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { PYTHON } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";

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
/** The module, and the make-model folder whose config.json and tokenizer it takes. */
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
} as const;

function torch(...args: string[]): string {
  const r = spawnSync(PYTHON, [script, ...args], { encoding: "utf8", maxBuffer: 16 << 20 });
  if (r.status !== 0) throw new Error(`torch_export.py ${args[0]} failed: ${r.stderr.slice(-2000)}`);
  return r.stdout;
}

beforeAll(() => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
});

describe.skipIf(!hasTorch)("a torch.onnx.export graph without a KV cache", () => {
  it.each(Object.keys(MODELS) as (keyof typeof MODELS)[])(
    "%s: generation adds a cache, uses it, and writes the float64 module's greedy text at batch 8 and 1",
    async (name) => {
      const m = MODELS[name];
      const md = join(dir, name);
      await writeModelInStyle(md, "plain", {
        family: m.family,
        layers: 2,
        hidden: 32,
        heads: 4,
        ...(m.kvHeads ? { kvHeads: m.kvHeads } : {}),
        tokenizer: "llama3.1-1k",
      });
      rmSync(join(md, "model.onnx"));
      torch("export", m.module, md, String(m.seed));
      const tok = await PromptTokenizer.load(md);
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
