/**
 * `hsm make-model --style/--family`: every style the writer knows comes out
 * as the graph hsm then recognizes, and an unknown style or family is one
 * usage error naming the flag.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/index.js";
import { MODEL_STYLES } from "../../src/synthetic/export-styles.js";
import { FAMILIES, LLAMA_FAMILIES, type LlamaFamily } from "../../src/synthetic/llama.js";
import { inspectModel } from "../../src/extract/extract.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-export-styles-");
const SMALL = { layers: 2, hidden: 32, heads: 4, tokenizer: "llama3.1-1k" } as const;

describe("make-model styles", () => {
  const expected: Record<(typeof MODEL_STYLES)[number], { style: string; inputs: string; names: string | undefined }> =
    {
      plain: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
      "with-past": {
        style: "structural",
        inputs:
          "input_ids attention_mask position_ids past_key_values.0.key past_key_values.0.value past_key_values.1.key past_key_values.1.value",
        names: "names (torch-names) agree on all 2 blocks",
      },
      merged: {
        style: "optimum-merged+structural",
        inputs:
          "input_ids attention_mask position_ids past_key_values.0.key past_key_values.0.value past_key_values.1.key past_key_values.1.value use_cache_branch",
        names: "names (torch-names) agree on all 2 blocks",
      },
      "dynamo-names": {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names: none to check against (graph style seen: dynamo-names)",
      },
      anonymous: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names: none to check against (graph style seen: anonymous)",
      },
      genai: {
        style: "structural",
        inputs:
          "input_ids attention_mask past_key_values.0.key past_key_values.1.key past_key_values.0.value past_key_values.1.value",
        names: "names (genai) agree on all 2 blocks",
      },
      "genai-fp16": {
        style: "structural",
        inputs:
          "input_ids attention_mask past_key_values.0.key past_key_values.1.key past_key_values.0.value past_key_values.1.value",
        names: "names (genai) agree on all 2 blocks",
      },
      "genai-int4": {
        style: "structural",
        inputs:
          "input_ids attention_mask past_key_values.0.key past_key_values.1.key past_key_values.0.value past_key_values.1.value",
        names: "names (genai) agree on all 2 blocks",
      },
      q4: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
      int8: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
      nf4: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
      fp16: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
      q4f16: {
        style: "structural",
        inputs: "input_ids attention_mask position_ids",
        names: "names (torch-names) agree on all 2 blocks",
      },
    };
  it.each(MODEL_STYLES)("%s: written, then recognized as such", async (style) => {
    const m = join(dir, style);
    await writeTinyModel(m, { ...SMALL, style, family: style === "anonymous" ? "neox" : undefined });
    const { inspection } = await inspectModel(m);
    const want = expected[style]!;
    expect({
      style: [...inspection.plan.prepared, inspection.plan.strategy].join("+"),
      inputs: inspection.inputs.map((i) => i.name).join(" "),
      names: inspection.plan.crossCheck,
    }).toEqual(want);
  });

  // The families with graph builders of their own are written in optimum's styles only (families.ts).
  const familyStyles = FAMILIES.flatMap((family) =>
    (LLAMA_FAMILIES.includes(family as LlamaFamily) ? (["plain", "q4f16"] as const) : (["plain"] as const)).map(
      (style) => [family, style] as const,
    ),
  );
  it.each(familyStyles)(
    "--family %s --style %s: written, loadable, recognized by structure with names agreeing",
    async (family, style) => {
      const m = join(dir, `${family}-${style}`);
      await writeTinyModel(m, { ...SMALL, style, family });
      const { inspection } = await inspectModel(m);
      expect([inspection.plan.strategy, inspection.plan.crossCheck]).toEqual([
        "structural",
        "names (torch-names) agree on all 2 blocks",
      ]);
      // A float16 graph loads only when every branch of phi3's LongRoPE If is float16 too.
      const session = await ort.InferenceSession.create(
        join(m, style === "plain" ? "model.onnx" : "onnx/model_q4f16.onnx"),
      );
      await session.release();
    },
  );

  it("refuses an unknown style or family in one line, writing nothing", () => {
    for (const [flag, value, message] of [
      [
        "--style",
        "fancy",
        'hsm: Expected --style plain, with-past, merged, dynamo-names, anonymous, genai, genai-fp16, genai-int4, q4, int8, nf4, fp16, q4f16 but received "fancy"',
      ],
      [
        "--family",
        "mamba",
        "hsm: Expected --family llama, gemma, qwen2, phi3, neox, gpt2, opt, bloom, mpt, gptj, codegen, gpt_neo, gpt_bigcode, " +
          'falcon, phi, stablelm, mistral, mixtral, olmo, starcoder2 but received "mamba"',
      ],
    ] as const) {
      const out = join(dir, `bad-${value}`);
      const r = spawnSync(process.execPath, [BIN, "make-model", out, flag, value], { encoding: "utf8" });
      expect(r.status).toBe(2);
      expect(r.stderr.trim()).toBe(message);
      expect(existsSync(out)).toBe(false);
    }
  });
});
