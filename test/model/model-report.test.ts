/**
 * `hsm inspect-model`'s report: the compute dtype and weight format read from
 * a graph's operators and initializer types (hand-built graphs of each
 * format), and, on a generated model, the style, the method per stored
 * tensor and the inputs fed, in plain text and JSON.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { graphFormat } from "../../src/model/model-report.js";
import { DataType, type GraphProto } from "../../src/onnx/graph.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-report-");
const modelDir = join(dir, "model");

beforeAll(async () => {
  await writeTinyModel(modelDir, { layers: 3, hidden: 32, heads: 4, kvHeads: 2, withPast: true, seed: 5 });
});

/** A graph of one product `op` over input x, weight w and (for quantized ops) scales s, with a float32 output. */
function graph(
  op: string,
  types: { w: number; s?: number },
  attribute: { name: string; i: number }[] = [],
): GraphProto {
  const initializer = [{ name: "w", dataType: types.w }, ...(types.s ? [{ name: "s", dataType: types.s }] : [])];
  return {
    node: [{ opType: op, input: ["x", "w", ...(types.s ? ["s"] : [])], output: ["y"], attribute }],
    initializer,
    output: [{ name: "y", type: { tensorType: { elemType: DataType.FLOAT } } }],
  };
}

describe("compute dtype and weight format", () => {
  it.each([
    ["float32 MatMul", graph("MatMul", { w: DataType.FLOAT }), "float32", "float32"],
    ["float16 MatMul behind float32 outputs", graph("MatMul", { w: DataType.FLOAT16 }), "float16", "float16"],
    ["bfloat16 Gemm", graph("Gemm", { w: DataType.BFLOAT16 }), "bfloat16", "bfloat16"],
    [
      "MatMulNBits with float32 scales (q4)",
      graph("MatMulNBits", { w: 2, s: DataType.FLOAT }, [{ name: "bits", i: 4 }]),
      "float32",
      "int4",
    ],
    [
      "MatMulNBits with float16 scales (q4f16)",
      graph("MatMulNBits", { w: 2, s: DataType.FLOAT16 }, [{ name: "bits", i: 4 }]),
      "float16",
      "int4",
    ],
    [
      "MatMulNBits with 8 bits",
      graph("MatMulNBits", { w: 2, s: DataType.FLOAT }, [{ name: "bits", i: 8 }]),
      "float32",
      "int8",
    ],
    ["MatMulInteger", graph("MatMulInteger", { w: 3 }), "float32", "int8"],
    [
      "MatMulBnb4 in NF4 mode",
      graph("MatMulBnb4", { w: 2, s: DataType.FLOAT }, [{ name: "quant_type", i: 1 }]),
      "float32",
      "nf4",
    ],
  ])("%s", (_, g, dtype, weights) => {
    expect(graphFormat(g)).toEqual({ dtype, weights, batchDependent: false });
  });

  it("calls a graph that quantizes activations per tensor (DynamicQuantizeLinear) batch-dependent", () => {
    const g = graph("MatMulInteger", { w: 3 });
    g.node = [{ opType: "DynamicQuantizeLinear", input: ["a"], output: ["x", "xs", "xz"] }, ...g.node!];
    expect(graphFormat(g)).toEqual({ dtype: "float32", weights: "int8", batchDependent: true });
  });
});

describe("hsm inspect-model", () => {
  it("names the style, the format, the inputs fed and the method per stored tensor", () => {
    const r = spawnSync(process.execPath, [BIN, "inspect-model", modelDir], { encoding: "utf8" });
    expect(r.status).toBe(0);
    const lines = r.stdout.split("\n");
    expect(lines).toContain("style: structural; computes in float32, weights float32");
    const feeds = lines.find((l) => l.startsWith("feeds"))!;
    expect(feeds).toMatch(
      /^feeds \(prompts left-padded\): input_ids ← token ids; attention_mask ← mask \(0 on padding\); position_ids ← cumsum\(mask\) − 1; past_key_values\.0\.key ← empty KV cache;/,
    );
    expect(feeds.split("; ")).toHaveLength(3 + 2 * 3);
    expect(lines).toContain(
      "  L002  /model/norm/Mul_1_output_0  — structure: final norm output between the last residual and the LM head (/model/norm/Mul_1) [structure]",
    );
  });

  it("prints the same as JSON, and says a tensor named on the command line was given", () => {
    const r = spawnSync(
      process.execPath,
      [
        BIN,
        "inspect-model",
        modelDir,
        "--json",
        "--hidden-tensors",
        "1=/model/layers.1/Add_1_output_0,final=/model/norm/Mul_1_output_0",
      ],
      { encoding: "utf8" },
    );
    expect(r.status).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.format).toEqual({ dtype: "float32", weights: "float32", batchDependent: false });
    expect(j.plan.strategy).toBe("explicit");
    expect(j.plan.tensors.map((t: { layer: number; method: string }) => [t.layer, t.method])).toEqual([
      [1, "given"],
      [2, "given"],
    ]);
    expect(j.plan.inputs.paddingSide).toBe("left");
    expect(j.plan.inputs.feeds.map((f: { kind: string }) => f.kind)).toEqual([
      "input_ids",
      "attention_mask",
      "position_ids",
      "past",
      "past",
      "past",
      "past",
      "past",
      "past",
    ]);
  });
});
