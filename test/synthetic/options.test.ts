/** make-model's geometry checks, in the library. */
import { describe, expect, it } from "vitest";

import { DEFAULT_TINY_MODEL } from "../../src/defaults.js";
import { UsageError } from "../../src/errors.js";
import { validateTinyModelOptions } from "../../src/synthetic/options.js";

describe("validateTinyModelOptions", () => {
  it("fills every default: 4 heads of 16, 2 key/value heads", () => {
    expect(validateTinyModelOptions({})).toEqual({
      layers: 4,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      tokenizer: "llama3.1",
      seed: 1234,
    });
    expect(DEFAULT_TINY_MODEL).toMatchObject({ layers: 4, hidden: 64, heads: 4, tokenizer: "llama3.1", seed: 1234 });
    expect(validateTinyModelOptions({ heads: 8, hidden: 32, withPast: true })).toMatchObject({
      heads: 8,
      kvHeads: 4,
      withPast: true,
    });
    expect(validateTinyModelOptions({ heads: 1, hidden: 2 })).toMatchObject({ heads: 1, kvHeads: 1 });
  });

  it("names the flag to change", () => {
    const bad: [object, string][] = [
      [{ tokenizer: "gpt2" }, 'Expected --tokenizer llama3.1, llama3.1-1k, qwen3 but received "gpt2"'],
      [{ hidden: 6, heads: 4 }, "Expected --hidden to be an even multiple of --heads per head, but 6 / 4 is not"],
      // 12 / 4 = 3 per head: rotary embeddings need an even head width.
      [{ hidden: 12, heads: 4 }, "Expected --hidden to be an even multiple of --heads per head, but 12 / 4 is not"],
      [{ hidden: 64, heads: 4, kvHeads: 3 }, "Expected --kv-heads to divide --heads (4) but received 3"],
      // Three heads have no whole half: the default cannot be used, and the message says so.
      [{ hidden: 12, heads: 3 }, "Expected --kv-heads to divide --heads (3) but received 1.5"],
      // 4 bytes a weight: 2 × 128,256 × 64 for the embedding and the LM head, then per block 64 × (64 + 64 + 2 ×
      // 32) for q, o, k and v, 3 × 64 × 128 for the MLP and 2 × 64 for the norms, and 64 for the final norm.
      [
        { layers: 6_813 },
        "Expected a model of at most 1,024 MiB of float32 weights, but --layers 6813, --hidden 64 and --intermediate 128 with the llama3.1 vocabulary (128,256 tokens) make 1,025 MiB",
      ],
      [
        { layers: 1_000_000, intermediate: 64 },
        "Expected a model of at most 1,024 MiB of float32 weights, but --layers 1000000, --hidden 64 and --intermediate 64 with the llama3.1 vocabulary (128,256 tokens) make 94,301 MiB",
      ],
    ];
    for (const [options, message] of bad)
      expect(() => validateTinyModelOptions(options)).toThrow(new UsageError(message));
    // One block fewer fits: 1,073,625,344 bytes.
    expect(validateTinyModelOptions({ layers: 6_812 })).toMatchObject({ layers: 6_812 });
  });
});
