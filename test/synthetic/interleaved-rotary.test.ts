/**
 * The GPT-J and CodeGen writers: onnxruntime running their graphs computes the
 * logits of the independent float64 reference, with and without a
 * `position_ids` input, token by token through the KV cache, and with left
 * padding, which without position_ids moves the real tokens' positions (seen
 * in the cached keys; rotary scores depend only on differences, so the logits
 * stay those of the unpadded sequence); config.json carries each family's own
 * field names.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import {
  buildCodegenOnnx,
  buildGptjOnnx,
  codegenConfig,
  codegenConfigJson,
  codegenWeights,
  gptjConfig,
  gptjConfigJson,
  gptjWeights,
} from "../../src/synthetic/interleaved-rotary.js";
import {
  float32Linear,
  type GraphVariant,
  type LinearWriter,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import { referenceCodegen, referenceGptj, type RotaryReference } from "../helpers/interleaved-rotary-reference.js";
import { LOGITS_F32 } from "../tolerances.js";

const OPTIONS: TinyModelOptions = { layers: 2, hidden: 64, heads: 4, seed: 21 };
const SEQUENCES = [
  [1024, 791, 68, 315, 982, 374, 25],
  [1024, 12],
  [1024, 300, 300, 300, 7, 1000, 1023, 5, 99, 640, 18],
];

interface Family {
  name: string;
  heads: number;
  headDim: number;
  build: (withPast: boolean, variant: GraphVariant) => Uint8Array;
  reference: (ids: number[], positions?: number[]) => RotaryReference;
  configJson: (withPast: boolean) => string;
  /** Fields config.json must hold, in the family's own names. */
  fields: Record<string, unknown>;
  /** The weights the linear writer is asked for, in order. */
  projections: string[];
}

const FIELDS = {
  n_embd: 64,
  n_layer: 2,
  n_head: 4,
  n_positions: 2048,
  rotary_dim: 8,
  n_inner: null,
  activation_function: "gelu_new",
  layer_norm_epsilon: 1e-5,
  vocab_size: 1280,
  bos_token_id: 1024,
  eos_token_id: 1025,
  tie_word_embeddings: false,
  torch_dtype: "float32",
};

const blockProjections = (attn: string[]) =>
  [0, 1]
    .flatMap((i) =>
      [...attn.map((a) => `attn.${a}`), "mlp.fc_in", "mlp.fc_out"].map((m) => `transformer.h.${i}.${m}.weight`),
    )
    .concat("lm_head.weight");

const gptj: Family = (() => {
  const c = gptjConfig(OPTIONS);
  const w = gptjWeights(c, OPTIONS.seed!);
  return {
    name: "gptj",
    heads: c.n_head,
    headDim: c.n_embd / c.n_head,
    build: (withPast, variant) => buildGptjOnnx(c, w, withPast, variant),
    reference: (ids, positions) => referenceGptj(c, w, ids, positions),
    configJson: (withPast) => gptjConfigJson(c, withPast),
    fields: { ...FIELDS, architectures: ["GPTJForCausalLM"], model_type: "gptj" },
    projections: blockProjections(["q_proj", "k_proj", "v_proj", "out_proj"]),
  };
})();

const codegen: Family = (() => {
  const c = codegenConfig(OPTIONS);
  const w = codegenWeights(c, OPTIONS.seed!);
  return {
    name: "codegen",
    heads: c.n_head,
    headDim: c.n_embd / c.n_head,
    build: (withPast, variant) => buildCodegenOnnx(c, w, withPast, variant),
    reference: (ids, positions) => referenceCodegen(c, w, ids, positions),
    configJson: (withPast) => codegenConfigJson(c, withPast),
    fields: { ...FIELDS, n_ctx: 2048, architectures: ["CodeGenForCausalLM"], model_type: "codegen" },
    projections: blockProjections(["qkv_proj", "out_proj"]),
  };
})();

const sessions = new Map<string, Promise<ort.InferenceSession>>();

function session(f: Family, withPast: boolean, variant: GraphVariant): Promise<ort.InferenceSession> {
  const key = `${f.name} ${withPast} ${JSON.stringify(variant)}`;
  let s = sessions.get(key);
  if (!s) sessions.set(key, (s = ort.InferenceSession.create(Buffer.from(f.build(withPast, variant)))));
  return s;
}

const int64 = (values: number[]) => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), [1, values.length]);

interface Step {
  /** The last position's logits. */
  logits: Float32Array;
  /** The `present.*` outputs by name. */
  presents: Record<string, ort.Tensor>;
}

/**
 * One batch-1 run: `past` feeds the cache inputs (empty ones when absent), the mask covers
 * past and new tokens (all ones unless given), and position_ids, where the graph has it,
 * are `positions` or past … past + T − 1.
 */
async function run(
  f: Family,
  s: ort.InferenceSession,
  ids: number[],
  o: { past?: Record<string, ort.Tensor>; mask?: number[]; positions?: number[] } = {},
): Promise<Step> {
  const pastLength = o.past ? o.past["present.0.key"]!.dims[2]! : 0;
  const feeds: Record<string, ort.Tensor> = {
    input_ids: int64(ids),
    attention_mask: int64(o.mask ?? Array(pastLength + ids.length).fill(1)),
  };
  if (s.inputNames.includes("position_ids"))
    feeds.position_ids = int64(o.positions ?? ids.map((_, t) => pastLength + t));
  for (const name of s.inputNames.filter((n) => n.startsWith("past_key_values."))) {
    feeds[name] =
      o.past?.[name.replace("past_key_values.", "present.")] ??
      new ort.Tensor("float32", new Float32Array(0), [1, f.heads, 0, f.headDim]);
  }
  const out = await s.run(feeds);
  const logits = out.logits!;
  const V = logits.dims[2]!;
  const T = logits.dims[1]!;
  const presents = Object.fromEntries(Object.entries(out).filter(([n]) => n.startsWith("present.")));
  return { logits: (logits.data as Float32Array).slice((T - 1) * V, T * V), presents };
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

describe.each([gptj, codegen])("the $name writer", (f) => {
  it("computes the reference's logits, with position_ids 0 … n − 1 or none", async () => {
    const withIds = await session(f, false, {});
    const without = await session(f, false, { positionIds: false });
    expect(withIds.inputNames).toEqual(["input_ids", "attention_mask", "position_ids"]);
    expect(without.inputNames).toEqual(["input_ids", "attention_mask"]);
    expect(withIds.outputNames).toEqual(["logits"]);
    for (const ids of SEQUENCES) {
      const want = f.reference(ids).logits;
      const a = (await run(f, withIds, ids)).logits;
      const b = (await run(f, without, ids)).logits;
      expect(maxDiff(a, want)).toBeLessThanOrEqual(LOGITS_F32);
      expect(maxDiff(b, a)).toBeLessThanOrEqual(LOGITS_F32);
    }
  });

  it("rotates by the positions position_ids gives, not the ones it would count", async () => {
    const s = await session(f, false, {});
    const ids = SEQUENCES[0]!;
    const positions = ids.map((_, t) => 40 + 3 * t);
    const got = (await run(f, s, ids, { positions })).logits;
    expect(maxDiff(got, f.reference(ids, positions).logits)).toBeLessThanOrEqual(LOGITS_F32);
    // Uneven steps change the distances rotary scores see: the same tokens at 0 … n − 1 give other logits.
    expect(maxDiff(got, f.reference(ids).logits)).toBeGreaterThan(100 * LOGITS_F32);
  });

  it.each([true, false])(
    "decodes through the cache as the full forward computes (position_ids: %s)",
    async (hasIds) => {
      const withPast = await session(f, true, { positionIds: hasIds });
      const present = await session(f, false, { positionIds: hasIds, present: true });
      expect(withPast.inputNames.slice(hasIds ? 3 : 2, hasIds ? 5 : 4)).toEqual([
        "past_key_values.0.key",
        "past_key_values.0.value",
      ]);
      expect(withPast.outputNames).toEqual([
        "logits",
        "present.0.key",
        "present.0.value",
        "present.1.key",
        "present.1.value",
      ]);
      expect(present.outputNames).toEqual(withPast.outputNames);
      for (const ids of SEQUENCES) {
        const prompt = ids.slice(0, -1);
        const first = await run(f, withPast, prompt);
        const noPast = await run(f, present, prompt);
        expect(maxDiff(first.logits, noPast.logits)).toBeLessThanOrEqual(LOGITS_F32);
        for (const [name, t] of Object.entries(first.presents)) {
          expect(t.dims).toEqual([1, f.heads, prompt.length, f.headDim]);
          expect(maxDiff(t.data as Float32Array, noPast.presents[name]!.data as Float32Array)).toBeLessThanOrEqual(
            LOGITS_F32,
          );
        }
        const next = await run(f, withPast, ids.slice(-1), { past: noPast.presents });
        expect(next.presents["present.1.value"]!.dims).toEqual([1, f.heads, ids.length, f.headDim]);
        expect(maxDiff(next.logits, f.reference(ids).logits)).toBeLessThanOrEqual(LOGITS_F32);
      }
    },
  );

  it("shifts left-padded positions without position_ids (the cached keys move, the logits do not)", async () => {
    const counted = await session(f, false, { positionIds: false, present: true });
    const given = await session(f, false, { present: true });
    const ids = SEQUENCES[0]!;
    const pads = 3;
    const padded = await run(f, counted, [...Array(pads).fill(1025), ...ids], {
      mask: [...Array(pads).fill(0), ...ids.map(() => 1)],
    });
    expect(maxDiff(padded.logits, f.reference(ids).logits)).toBeLessThanOrEqual(LOGITS_F32);
    // Layer 0's keys of the real tokens: those of positions pads … pads + n − 1, not 0 … n − 1.
    const realKeys = (t: ort.Tensor, skip: number) => {
      const [, H, T, hd] = t.dims as number[];
      const data = t.data as Float32Array;
      return Array.from({ length: H! }, (_, h) => data.slice((h * T! + skip) * hd!, (h + 1) * T! * hd!)).flatMap((a) =>
        Array.from(a),
      );
    };
    const got = realKeys(padded.presents["present.0.key"]!, pads);
    const shifted = await run(f, given, ids, { positions: ids.map((_, t) => pads + t) });
    const unshifted = await run(f, given, ids);
    expect(maxDiff(got, realKeys(shifted.presents["present.0.key"]!, 0))).toBeLessThanOrEqual(LOGITS_F32);
    expect(maxDiff(got, realKeys(unshifted.presents["present.0.key"]!, 0))).toBeGreaterThan(100 * LOGITS_F32);
  });

  it("writes every projection and the LM head through the variant's linear writer", async () => {
    const names: string[] = [];
    const linear: LinearWriter = (g, scope, x, name, weight, out, inp) => {
      names.push(name);
      return float32Linear(g, scope, x, name, weight, out, inp);
    };
    const s = await ort.InferenceSession.create(Buffer.from(f.build(false, { linear })));
    expect(names).toEqual(f.projections);
    const ids = SEQUENCES[0]!;
    expect(maxDiff((await run(f, s, ids)).logits, f.reference(ids).logits)).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("writes config.json in the family's own field names", () => {
    const json = JSON.parse(f.configJson(true)) as Record<string, unknown>;
    expect(json).toMatchObject({ ...f.fields, use_cache: true });
    expect(JSON.parse(f.configJson(false))).toMatchObject({ use_cache: false });
    expect(json).not.toHaveProperty("hidden_size");
    expect(json).not.toHaveProperty("num_attention_heads");
    if (f.name === "gptj") expect(json).not.toHaveProperty("n_ctx");
  });
});

describe("codegenConfig", () => {
  it("refuses heads that do not split into CodeGen's four shards", () => {
    expect(() => codegenConfig({ hidden: 48, heads: 6 })).toThrow(/divisible by 4/);
  });
});
