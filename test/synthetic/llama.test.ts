/**
 * The tiny-model writer: the ONNX graph onnxruntime runs computes the logits
 * of the independent float64 reference, forced transitions included, and
 * config.json carries the EOS ids asked for.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import {
  buildLlamaOnnx,
  FORCED_LOGIT,
  tinyConfig,
  tinyWeights,
  writeTinyModel,
  type LlamaConfig,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import { referenceLogitsFamily } from "../helpers/family-reference.js";
import { referenceGreedy, referenceHidden, referenceLogits, referenceStepper } from "../helpers/llama-reference.js";
import { tempDir } from "../helpers/tmp.js";
import { LOGITS_F32 } from "../tolerances.js";

const dir = tempDir("hsm-models-");

async function lastLogits(modelDir: string, ids: number[]): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(join(modelDir, "model.onnx"));
  const T = ids.length;
  const feeds: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, T]),
    attention_mask: new ort.Tensor("int64", new BigInt64Array(T).fill(1n), [1, T]),
    position_ids: new ort.Tensor("int64", BigInt64Array.from(ids.keys(), BigInt), [1, T]),
  };
  const logits = (await session.run(feeds)).logits!;
  const V = logits.dims[2]!;
  const out = (logits.data as Float32Array).slice((T - 1) * V, T * V);
  await session.release();
  return out;
}

describe("writeTinyModel", () => {
  const ids = [128000, 791, 6864, 315, 9822, 374, 25];

  it("writes a graph whose logits are the reference's, and forced transitions raise exactly their token", async () => {
    const plain: TinyModelOptions = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, seed: 5 };
    const forced: TinyModelOptions = {
      ...plain,
      forcedNext: [
        [25, 128001],
        [374, 42],
      ],
      eosTokenId: [128001, 128009],
    };
    await writeTinyModel(join(dir, "plain"), plain);
    await writeTinyModel(join(dir, "forced"), forced);
    const a = await lastLogits(join(dir, "plain"), ids);
    const b = await lastLogits(join(dir, "forced"), ids);
    const ref = referenceLogits(tinyConfig(forced), tinyWeights(forced), ids);
    let worst = 0;
    for (let v = 0; v < a.length; v++) {
      worst = Math.max(worst, Math.abs(b[v]! - ref[v]!));
      if (v !== 128001) expect(Math.abs(b[v]! - a[v]!)).toBeLessThanOrEqual(LOGITS_F32); // the forced features add zeros elsewhere
    }
    expect(worst).toBeLessThanOrEqual(LOGITS_F32);
    expect(b[128001]! - a[128001]!).toBeCloseTo(FORCED_LOGIT, 4);
    // The transition from token 374 does not fire: the last input token is 25.
    expect(Math.abs(b[42]! - a[42]!)).toBeLessThanOrEqual(LOGITS_F32);
    expect(JSON.parse(readFileSync(join(dir, "forced", "config.json"), "utf8"))).toMatchObject({
      eos_token_id: [128001, 128009],
    });
    expect(JSON.parse(readFileSync(join(dir, "plain", "config.json"), "utf8"))).toMatchObject({
      eos_token_id: 128001,
      max_position_embeddings: 2048,
    });
  });
});

describe("the gemma family (Gemma2)", () => {
  const o: TinyModelOptions = { family: "gemma", layers: 2, hidden: 32, heads: 4, seed: 8, tokenizer: "llama3.1-1k" };
  const ids = [1024, 791, 68, 315, 982, 374, 25, 300, 12, 77];

  /** The last position's logits of the graph built from `config` (no cache), run by onnxruntime. */
  async function graphLogits(config: LlamaConfig): Promise<Float32Array> {
    const session = await ort.InferenceSession.create(buildLlamaOnnx(config, tinyWeights(o)));
    const T = ids.length;
    const logits = (
      await session.run({
        input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, T]),
        attention_mask: new ort.Tensor("int64", new BigInt64Array(T).fill(1n), [1, T]),
        position_ids: new ort.Tensor("int64", BigInt64Array.from(ids.keys(), BigInt), [1, T]),
      })
    ).logits!;
    await session.release();
    return (logits.data as Float32Array).slice((T - 1) * config.vocab_size);
  }
  const worst = (a: ArrayLike<number>, b: ArrayLike<number>) =>
    Array.from(a).reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);

  it("writes Gemma2's config: tanh GELU, soft-capping, query_pre_attn_scalar and the sliding window", async () => {
    await writeTinyModel(join(dir, "gemma"), { ...o, slidingWindow: 4 });
    expect(JSON.parse(readFileSync(join(dir, "gemma", "config.json"), "utf8"))).toMatchObject({
      model_type: "gemma2",
      hidden_activation: "gelu_pytorch_tanh",
      query_pre_attn_scalar: 8,
      attn_logit_softcapping: 50,
      final_logit_softcapping: 30,
      sliding_window: 4,
    });
    expect(tinyConfig(o).sliding_window).toBe(4096);
  });

  it("computes the reference's logits with soft-caps and a window that act, and without them", async () => {
    // Caps and a window small enough to change the logits of these ten tokens.
    const acting = { ...tinyConfig(o), attn_logit_softcapping: 1, final_logit_softcapping: 2, sliding_window: 3 };
    const off = { ...acting, attn_logit_softcapping: null, final_logit_softcapping: null, sliding_window: null };
    const variants = [acting, off, { ...off, sliding_window: 3 }, { ...off, attn_logit_softcapping: 1 }];
    const refs = variants.map((c) => referenceLogitsFamily(c, tinyWeights(o), ids));
    for (const [k, c] of variants.entries())
      expect(worst(await graphLogits(c), refs[k]!)).toBeLessThanOrEqual(LOGITS_F32);
    // Each of them changes the logits; the final cap bounds them.
    for (const r of refs.slice(1)) expect(worst(refs[0]!, r)).toBeGreaterThan(0.01);
    expect(Math.max(...refs[0]!.map(Math.abs))).toBeLessThan(2);
  });
});

describe("the float64 reference fed one token at a time", () => {
  const o: TinyModelOptions = {
    layers: 2,
    hidden: 32,
    heads: 4,
    kvHeads: 2,
    seed: 6,
    tokenizer: "llama3.1-1k",
    forcedNext: [[300, 1025]],
  };
  const config = tinyConfig(o);
  const weights = tinyWeights(o);

  it("gives every prefix's state bit for bit as recomputing the whole prefix does", () => {
    const ids = [1024, 791, 68, 315, 982, 374, 25, 300];
    const step = referenceStepper(config, weights);
    ids.forEach((id, t) => {
      const got = step(id);
      const want = referenceHidden(config, weights, ids.slice(0, t + 1)).at(-1)!;
      expect(Buffer.from(got.buffer)).toEqual(Buffer.from(want.buffer));
    });
  });

  it("decodes greedily to the tokens of full recomputation, forced transitions and the EOS stop included", () => {
    for (const prompt of [
      [1024, 791, 68, 315],
      [1024, 12, 300],
    ]) {
      const want: number[] = [];
      while (want.length < 12) {
        const logits = referenceLogits(config, weights, [...prompt, ...want]);
        want.push(logits.indexOf(Math.max(...logits)));
        if (want.at(-1) === 1025) break;
      }
      expect(referenceGreedy(config, weights, prompt, new Set([1025]), 12)).toEqual(want);
    }
    // The second prompt ends on the forced token: its first new token is the EOS, and decoding stops there.
    expect(referenceGreedy(config, weights, [1024, 12, 300], new Set([1025]), 12)).toEqual([1025]);
  });
});
