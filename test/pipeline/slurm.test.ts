/** SLURM job names (src/pipeline/slurm.ts): one model's jobs never share a name with another model's. */
import { createHash } from "node:crypto";

import { describe, expect, it } from "vitest";

import { modelJobPrefix } from "../../src/pipeline/slurm.js";

const PREFIX = "hsm-773b8e13-";
const hex8 = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 8);

describe("modelJobPrefix", () => {
  it("names a model by its stem and 8 hex digits of its whole name's sha256", () => {
    expect(modelJobPrefix(PREFIX, "tiny-a")).toBe(`hsm-773b8e13-tiny-a-${hex8("tiny-a")}-`);
  });

  it("keeps apart models whose stems are cut or changed alike", () => {
    const pairs = [
      [
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
      ],
      ["a+b", "a_b"],
      ["x".repeat(60) + "1", "x".repeat(60) + "2"],
    ];
    for (const [a, b] of pairs) {
      expect(modelJobPrefix(PREFIX, a!), `${a} / ${b}`).not.toBe(modelJobPrefix(PREFIX, b!));
      for (const name of [a!, b!])
        expect(modelJobPrefix(PREFIX, name)).toMatch(/^hsm-773b8e13-[A-Za-z0-9._-]{1,48}-[0-9a-f]{8}-$/);
    }
  });
});
