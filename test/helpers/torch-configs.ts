/**
 * config.json of the torch_export.py families that make-model does not write: the folder of the make-model family
 * they start from (its tokenizer and sizes: Llama's, Qwen2's for Qwen3, Gemma 2's for Gemma 3) with the
 * architecture, model_type and fields transformers' config of the family adds.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const TORCH_CONFIGS = {
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
export function writeTorchConfig(dir: string, family: keyof typeof TORCH_CONFIGS): void {
  const path = join(dir, "config.json");
  const config = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  writeFileSync(path, JSON.stringify({ ...config, ...TORCH_CONFIGS[family] }, null, 2) + "\n");
}
