/**
 * The names config.json gives a decoder's sizes, family by family (Llama's `num_hidden_layers`, GPT-2's `n_layer`
 * and `n_embd`, BLOOM's `n_embed`, MPT's `n_layers` and `d_model`, GPT-Neo's `num_layers` and `num_heads`, Falcon's
 * `num_kv_heads`, …), each list in the order its names are tried. Reading the model folder
 * (src/model/model-dir.ts) and sizing an added KV cache (add-cache.ts) take them from here, so that a name one
 * reads the other reads too.
 */
export const CONFIG_KEYS = {
  layers: ["num_hidden_layers", "n_layer", "n_layers", "num_layers"],
  hidden: ["hidden_size", "n_embd", "n_embed", "d_model"],
  heads: ["num_attention_heads", "n_head", "num_heads", "n_heads"],
  kvHeads: ["num_key_value_heads", "n_head_kv", "num_kv_heads"],
} as const satisfies Record<string, readonly string[]>;
