import type { Command } from "commander";

import { DEFAULT_TINY_MODEL } from "../../defaults.js";
import { writeTinyModel, type TinyModelOptions } from "../../index.js";
import { intOption } from "../options.js";
import { out } from "../print.js";

async function action(dir: string, opts: TinyModelOptions & { style?: string }): Promise<void> {
  const t0 = performance.now();
  const c = await writeTinyModel(dir, { ...opts, withPast: Boolean(opts.withPast) });
  out(
    `${dir}: ${opts.style ?? "plain"} style, ${c.num_hidden_layers} layers, d_model ${c.hidden_size}, ${c.num_attention_heads} heads (${c.num_key_value_heads} KV), ` +
      `vocabulary ${c.vocab_size}; written in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
}

const FAMILY_HELP =
  "graph shape: llama, gemma (Gemma2: √d embedding scale, (1 + w) norms, four norms per block, GELU MLP, " +
  "soft-capped scores and logits, a 4096-position window on even layers), qwen2 (q/k/v biases), phi3 (packed qkv " +
  "and gate_up projections, LongRoPE If), neox (parallel blocks); or, in the optimum styles " +
  "only, gpt2 and opt (learned positions, LayerNorm with biases), bloom and mpt (ALiBi), gptj and codegen " +
  "(interleaved partial rotary, parallel blocks), gpt_neo (learned positions, local attention), gpt_bigcode " +
  "(multi-query, a fused key_value cache), falcon (multi-query, parallel blocks), phi (partial rotary, " +
  "parallel blocks), stablelm (partial rotary), mistral (sliding window), mixtral (mixture of experts), olmo " +
  "(LayerNorm without weights, clip_qkv), starcoder2 (biases, GELU MLP)";

export function makeModelCommand(program: Command): void {
  program
    .command("make-model")
    .summary("write a small Llama-style ONNX model folder with seeded random weights")
    .description(
      "Write a Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, final norm) with seeded " +
        "random weights as an ONNX model folder shaped like an optimum export: model.onnx with torch-style node names and " +
        "only logits (and, with --with-past, the KV cache) as outputs, config.json, and a real HuggingFace tokenizer.",
    )
    .argument("<dir>", "model folder to write: a new folder (an existing one is refused unless empty)")
    .option("--layers <n>", "decoder blocks", intOption("--layers", 1), DEFAULT_TINY_MODEL.layers)
    .option("--hidden <n>", "d_model", intOption("--hidden", 2), DEFAULT_TINY_MODEL.hidden)
    .option("--heads <n>", "attention heads", intOption("--heads", 1), DEFAULT_TINY_MODEL.heads)
    .option("--kv-heads <n>", "key/value heads (divides --heads)", intOption("--kv-heads", 1))
    .option("--intermediate <n>", "MLP width (default 2 × hidden)", intOption("--intermediate", 1))
    .option(
      "--tokenizer <name>",
      "llama3.1 (adds a BOS), llama3.1-1k (llama3.1 cut to 1,024 BPE ranks: a 1,280-token vocabulary) or qwen3 (no BOS)",
      DEFAULT_TINY_MODEL.tokenizer,
    )
    .option("--seed <n>", "weight seed", intOption("--seed", 0), DEFAULT_TINY_MODEL.seed)
    .option("--with-past", "add past_key_values.* inputs and present.* outputs")
    .option(
      "--style <name>",
      "export style: plain, with-past, merged (optimum's decoder_model_merged in model.onnx), dynamo-names or anonymous (renamed graphs); " +
        "genai, genai-fp16 or genai-int4 (an onnxruntime-genai build); q4, int8, nf4, fp16 or q4f16 (a transformers.js folder: onnx/model_q4.onnx, …)",
    )
    .option("--family <name>", FAMILY_HELP)
    .option("--external-data", "store the weights in model.onnx_data")
    .option(
      "--no-position-ids",
      "no position_ids input (positions counted inside the graph); with the plain style, optimum's legacy decoder",
    )
    .action(action);
}
