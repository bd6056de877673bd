/**
 * The families the suite writes and checks (test/model/families.test.ts on the CPU, test/model/webgpu.test.ts on
 * WebGPU), and the options each needs for its own mechanism to act on short prompts: one list, so that a family
 * added to it is run on every device.
 */
import type { OwnFamily, OwnFamilyOptions } from "../../src/synthetic/families.js";
import { FAMILIES as ALL_FAMILIES, LLAMA_FAMILIES, type Family, type LlamaFamily } from "../../src/synthetic/llama.js";

/**
 * Every family `make-model` writes (src/synthetic/llama.ts), in the suite's order: Llama, the graph shapes not
 * Llama's, then the Llama-shaped ones (Gemma2's embedding scale, four norms,
 * soft-capping and sliding window on every other layer, Qwen2's q, k and v biases, Phi-3's packed projections and
 * LongRoPE `If`, GPT-NeoX's parallel blocks), last so that the seeds of the others stay.
 */
export const FAMILIES: readonly Family[] = [
  "llama",
  ...ALL_FAMILIES.filter((f) => !(LLAMA_FAMILIES as readonly Family[]).includes(f)),
  ...LLAMA_FAMILIES.filter((f) => f !== "llama"),
];

/**
 * Windows and clamps small enough to act on the tests' prompts; smaller embeddings where the LM head is tied to
 * them (else greedy decoding mostly repeats the last token, whatever the cache holds). Phi-3's 110 positions put
 * original_max_position_embeddings at 55: in families.test.ts, LongRoPE's short factors for the prompts of 37 to
 * 50 tokens (and their MAX_NEW - 1 fed back), the long ones for those of 56 and 69.
 */
export const FAMILY_KNOBS: Partial<Record<OwnFamily | LlamaFamily, OwnFamilyOptions>> = {
  gpt_neo: { slidingWindow: 4, embedScale: 0.1 },
  gpt_bigcode: { embedScale: 0.03 },
  falcon: { embedScale: 0.1 },
  mistral: { slidingWindow: 4 },
  starcoder2: { slidingWindow: 4, embedScale: 0.1 },
  olmo: { clipQkv: 0.5 },
  phi3: { maxPositions: 110 },
  gemma: { slidingWindow: 4 },
};
