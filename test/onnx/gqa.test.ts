/**
 * GroupQueryAttention written out in standard operators (src/onnx/gqa.ts), checked against onnxruntime's CPU
 * kernel itself, both on the CPU: a genai build and its written-out twin are fed the same right-padded prompt
 * batch and then a decoding step over the kernel's own cache, as hsm feeds them, and must agree on every logit of
 * a real token and on the cache a step reads. Variants of the node (packed QKV, interleaved rotary, a local window,
 * a soft cap, no scale attribute) go through the same comparison.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { decomposeGroupQueryAttention, groupQueryAttentionGap } from "../../src/onnx/gqa.js";
import { decodeModel, encodeModel, type ModelProto, type NodeProto } from "../../src/onnx/graph.js";
import { buildGenaiModel } from "../../src/synthetic/genai.js";
import { float32Linear, tinyConfig, tinyWeights, type TinyModelOptions } from "../../src/synthetic/llama.js";

const OPTIONS: TinyModelOptions = { layers: 2, hidden: 64, heads: 4, kvHeads: 2, tokenizer: "llama3.1-1k", seed: 7 };
const config = tinyConfig({ ...OPTIONS, maxPositions: 64 });
const weights = tinyWeights({ ...OPTIONS, maxPositions: 64 });
const PROMPTS = [
  [5, 17, 300, 41, 9],
  [12, 800],
  [7, 7, 100, 250, 33, 61, 2],
];
const NEXT = [44, 90, 501];

/** Sets (or adds) an attribute of every GroupQueryAttention node. */
function setAttribute(model: ModelProto, name: string, value: number, type: 1 | 2 = 2): void {
  for (const n of model.graph!.node!.filter((x) => x.opType === "GroupQueryAttention")) {
    n.attribute = [
      ...(n.attribute ?? []).filter((a) => a.name !== name),
      type === 1 ? { name, type, f: value } : { name, type, i: value },
    ];
  }
}

/** Feeds query, key and value to every GroupQueryAttention node as one packed input. */
function packQkv(model: ModelProto): void {
  const nodes: NodeProto[] = [];
  for (const n of model.graph!.node!) {
    if (n.opType === "GroupQueryAttention") {
      const packed = `${n.name}/packed_qkv`;
      nodes.push({
        name: `${n.name}/Pack`,
        opType: "Concat",
        input: n.input!.slice(0, 3),
        output: [packed],
        attribute: [{ name: "axis", type: 2, i: -1 }],
      });
      n.input = [packed, "", "", ...n.input!.slice(3)];
    }
    nodes.push(n);
  }
  model.graph!.node = nodes;
}

const VARIANTS: Record<string, (m: ModelProto) => void> = {
  "the genai build": () => {},
  "packed QKV": packQkv,
  "interleaved rotary": (m) => setAttribute(m, "rotary_interleaved", 1),
  "a local window of 3": (m) => setAttribute(m, "local_window_size", 3),
  "a soft cap of 2": (m) => setAttribute(m, "softcap", 2, 1),
  "no scale attribute": (m) => {
    for (const n of m.graph!.node!) n.attribute = (n.attribute ?? []).filter((a) => a.name !== "scale");
  },
};

/** Right-padded ids and mask of `rows`, as hsm pads GroupQueryAttention graphs. */
function rightPadded(rows: number[][]): { ids: ort.Tensor; mask: ort.Tensor } {
  const T = Math.max(...rows.map((r) => r.length));
  const ids = new BigInt64Array(rows.length * T);
  const mask = new BigInt64Array(rows.length * T);
  rows.forEach((r, b) => r.forEach((t, j) => ((ids[b * T + j] = BigInt(t)), (mask[b * T + j] = 1n))));
  return { ids: new ort.Tensor("int64", ids, [rows.length, T]), mask: new ort.Tensor("int64", mask, [rows.length, T]) };
}

/** The prompt pass (empty cache) and one decoding step over `past` (the cache the prompt pass left). */
async function passes(session: ort.InferenceSession, past?: Record<string, ort.Tensor>) {
  const B = PROMPTS.length;
  const { ids, mask } = rightPadded(PROMPTS);
  const empty: Record<string, ort.Tensor> = {};
  for (const name of session.inputNames.filter((n) => n.startsWith("past_key_values.")))
    empty[name] = new ort.Tensor("float32", new Float32Array(0), [B, config.num_key_value_heads, 0, config.head_dim]);
  const prompt = await session.run({ input_ids: ids, attention_mask: mask, ...empty });
  const cache =
    past ??
    Object.fromEntries(
      Object.entries(prompt)
        .filter(([k]) => k.startsWith("present."))
        .map(([k, v]) => [k.replace("present.", "past_key_values."), v]),
    );
  const T = ids.dims[1]!;
  const grown = new BigInt64Array(B * (T + 1));
  PROMPTS.forEach((p, b) => {
    for (let j = 0; j < p.length; j++) grown[b * (T + 1) + j] = 1n;
    grown[b * (T + 1) + T] = 1n;
  });
  const step = await session.run({
    input_ids: new ort.Tensor("int64", BigInt64Array.from(NEXT, BigInt), [B, 1]),
    attention_mask: new ort.Tensor("int64", grown, [B, T + 1]),
    ...cache,
  });
  return { prompt, step, cache };
}

/** Largest |a − b| over the entries `keep(index)` selects. */
function maxDiff(a: ort.Tensor, b: ort.Tensor, keep: (i: number) => boolean = () => true): number {
  expect(b.dims).toEqual(a.dims);
  const x = a.data as Float32Array;
  const y = b.data as Float32Array;
  let m = 0;
  for (let i = 0; i < x.length; i++) if (keep(i)) m = Math.max(m, Math.abs(x[i]! - y[i]!));
  return m;
}

describe("GroupQueryAttention written out in standard operators", () => {
  it.each(Object.keys(VARIANTS))("computes what the CPU kernel computes: %s", async (variant) => {
    const original = buildGenaiModel(config, weights, float32Linear);
    VARIANTS[variant]!(original);
    const bytes = encodeModel(original);
    const twin = decodeModel(bytes);
    expect(groupQueryAttentionGap(twin)).toBeUndefined();
    expect(decomposeGroupQueryAttention(twin.graph!)).toBe(config.num_hidden_layers);
    expect(twin.graph!.node!.filter((n) => n.opType === "GroupQueryAttention")).toEqual([]);
    const options = { executionProviders: ["cpu"], logSeverityLevel: 4 } as const;
    const kernel = await passes(await ort.InferenceSession.create(bytes, options));
    const written = await passes(await ort.InferenceSession.create(encodeModel(twin), options), kernel.cache);

    // The prompt pass: logits of every real token, and the cache slots of real tokens.
    const T = Math.max(...PROMPTS.map((p) => p.length));
    const V = config.vocab_size;
    const realToken = (i: number) => Math.floor((i % (T * V)) / V) < PROMPTS[Math.floor(i / (T * V))]!.length;
    expect(maxDiff(kernel.prompt.logits!, written.prompt.logits!, realToken)).toBeLessThan(1e-4);
    const hd = config.head_dim;
    const realSlot = (i: number) =>
      Math.floor(i / hd) % T < PROMPTS[Math.floor(i / (config.num_key_value_heads * T * hd))]!.length;
    for (const name of Object.keys(kernel.prompt).filter((k) => k.startsWith("present.")))
      expect(maxDiff(kernel.prompt[name]!, written.prompt[name]!, realSlot), name).toBeLessThan(1e-4);
    // The decoding step: every logit, and the whole cache (slots after a row's tokens are zero in both).
    expect(maxDiff(kernel.step.logits!, written.step.logits!)).toBeLessThan(1e-4);
    for (const name of Object.keys(kernel.step).filter((k) => k.startsWith("present.")))
      expect(maxDiff(kernel.step[name]!, written.step[name]!), name).toBeLessThan(1e-5);
  });

  it("names what it cannot write out: an attention bias, an old opset", () => {
    const model = buildGenaiModel(config, weights, float32Linear);
    expect(groupQueryAttentionGap({ ...model, opsetImport: [{ domain: "", version: 14 }] })).toBe(
      "GroupQueryAttention in a graph of opset 14 (hsm writes it out from opset 15)",
    );
    const gqa = model.graph!.node!.find((n) => n.opType === "GroupQueryAttention")!;
    gqa.input = [...gqa.input!, "", "bias"];
    expect(groupQueryAttentionGap(model)).toBe(
      "GroupQueryAttention /model/layers.0/attn/GroupQueryAttention has input 10, which hsm cannot write out",
    );
  });
});
