/**
 * config.json of the torch_export.py families that make-model does not write: Llama's folder (its tokenizer and
 * sizes) with the architecture, model_type and fields transformers' config of the family adds.
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
} as const;

/** Rewrites `dir`'s config.json (make-model's Llama) as `family`'s. */
export function writeTorchConfig(dir: string, family: keyof typeof TORCH_CONFIGS): void {
  const path = join(dir, "config.json");
  const config = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  writeFileSync(path, JSON.stringify({ ...config, ...TORCH_CONFIGS[family] }, null, 2) + "\n");
}
