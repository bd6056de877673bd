/**
 * The GPT-Neo and GPT-BigCode writers: onnxruntime running their graphs
 * computes the logits of the independent float64 reference, with and without
 * a `position_ids` input, through the KV cache (GPT-BigCode's fused
 * `key_value` one), and with left padding as each family's torch code
 * positions it; GPT-Neo's local layers see only their window; config.json
 * carries each family's own field names.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import {
  buildGptBigcodeOnnx,
  buildGptNeoOnnx,
  gptBigcodeConfig,
  gptBigcodeConfigJson,
  gptBigcodeWeights,
  gptNeoConfig,
  gptNeoConfigJson,
  gptNeoWeights,
} from "../../src/synthetic/gpt-relatives.js";
import {
  float32Linear,
  type GraphVariant,
  type LinearWriter,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import {
  bigcodeFirstKeyValue,
  referenceGptBigcode,
  referenceGptNeo,
  type ReferenceForward,
} from "../helpers/gpt-relatives-reference.js";
import { LOGITS_F32 } from "../tolerances.js";

const OPTIONS: TinyModelOptions = { layers: 2, hidden: 64, heads: 4, maxPositions: 128, seed: 23 };
const HEAD_DIM = 16;
/** GPT-Neo's local window in these tests: shorter than most sequences, so the local layer drops keys. */
const WINDOW = 4;
const SEQUENCES = [
  [1024, 791, 68, 315, 982, 374, 25],
  [1024, 12],
  [1024, 300, 300, 300, 7, 1000, 1023, 5, 99, 640, 18],
];

interface Family {
  name: string;
  build: (withPast: boolean, variant: GraphVariant) => Uint8Array;
  reference: (ids: number[], positions?: number[]) => ReferenceForward;
  configJson: (withPast: boolean) => string;
  /** Fields config.json must hold, in the family's own names. */
  fields: Record<string, unknown>;
  /** The cache's input and output names for layer 0, in the order the graph declares them. */
  pastNames: string[];
  presentNames: string[];
  /** A cache tensor's shape for `seq` positions (batch 1), and the axis `seq` is on. */
  cacheDims: (seq: number) => number[];
  seqAxis: number;
  /** The weights the linear writer is asked for, in order. */
  projections: string[];
  /** With no position_ids input, does left padding move the real tokens' positions? */
  paddingShifts: boolean;
}

const neoConfig = gptNeoConfig(OPTIONS, WINDOW);
const neoWeights = gptNeoWeights(neoConfig, OPTIONS.seed!);

const gptNeo: Family = {
  name: "gpt_neo",
  build: (withPast, variant) => buildGptNeoOnnx(neoConfig, neoWeights, withPast, variant),
  reference: (ids, positions) => referenceGptNeo(neoConfig, neoWeights, ids, positions),
  configJson: (withPast) => gptNeoConfigJson(neoConfig, withPast),
  fields: {
    architectures: ["GPTNeoForCausalLM"],
    model_type: "gpt_neo",
    hidden_size: 64,
    num_layers: 2,
    num_heads: 4,
    intermediate_size: null,
    max_position_embeddings: 128,
    window_size: WINDOW,
    attention_types: [[["global", "local"], 1]],
    attention_layers: ["global", "local"],
    activation_function: "gelu_new",
    layer_norm_epsilon: 1e-5,
    vocab_size: 1280,
    bos_token_id: 1024,
    eos_token_id: 1025,
    tie_word_embeddings: true,
    torch_dtype: "float32",
  },
  pastNames: ["past_key_values.0.key", "past_key_values.0.value"],
  presentNames: ["present.0.key", "present.0.value", "present.1.key", "present.1.value"],
  cacheDims: (seq) => [1, 4, seq, HEAD_DIM],
  seqAxis: 2,
  projections: [0, 1]
    .flatMap((i) =>
      ["attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj", "attn.attention.out_proj"]
        .concat("mlp.c_fc", "mlp.c_proj")
        .map((m) => `transformer.h.${i}.${m}.weight`),
    )
    .concat("lm_head.weight"),
  paddingShifts: true,
};

function bigcode(multiQuery: boolean): Family {
  const c = gptBigcodeConfig(OPTIONS, multiQuery);
  const w = gptBigcodeWeights(c, OPTIONS.seed!);
  return {
    name: multiQuery ? "gpt_bigcode" : "gpt_bigcode (multi_query: false)",
    build: (withPast, variant) => buildGptBigcodeOnnx(c, w, withPast, variant),
    reference: (ids, positions) => referenceGptBigcode(c, w, ids, positions),
    configJson: (withPast) => gptBigcodeConfigJson(c, withPast),
    fields: {
      architectures: ["GPTBigCodeForCausalLM"],
      model_type: "gpt_bigcode",
      n_embd: 64,
      n_layer: 2,
      n_head: 4,
      n_inner: null,
      n_positions: 128,
      activation_function: "gelu_pytorch_tanh",
      layer_norm_epsilon: 1e-5,
      scale_attn_weights: true,
      multi_query: multiQuery,
      vocab_size: 1280,
      bos_token_id: 1024,
      eos_token_id: 1025,
      tie_word_embeddings: true,
      torch_dtype: "float32",
    },
    pastNames: ["past_key_values.0.key_value"],
    presentNames: ["present.0.key_value", "present.1.key_value"],
    cacheDims: (seq) => (multiQuery ? [1, seq, 2 * HEAD_DIM] : [1, 4, seq, 2 * HEAD_DIM]),
    seqAxis: multiQuery ? 1 : 2,
    projections: [0, 1]
      .flatMap((i) =>
        ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"].map((m) => `transformer.h.${i}.${m}.weight`),
      )
      .concat("lm_head.weight"),
    paddingShifts: false,
  };
}

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
 * One batch-1 run: `past` (present outputs of an earlier step) feeds the cache inputs (empty ones when absent),
 * the mask covers past and new tokens (all ones unless given), and position_ids, where the graph has it, are
 * `positions` or past … past + T − 1.
 */
async function run(
  f: Family,
  s: ort.InferenceSession,
  ids: number[],
  o: { past?: Record<string, ort.Tensor>; mask?: number[]; positions?: number[] } = {},
): Promise<Step> {
  const pastLength = o.past ? o.past[f.presentNames[0]!]!.dims[f.seqAxis]! : 0;
  const feeds: Record<string, ort.Tensor> = {
    input_ids: int64(ids),
    attention_mask: int64(o.mask ?? Array(pastLength + ids.length).fill(1)),
  };
  if (s.inputNames.includes("position_ids"))
    feeds.position_ids = int64(o.positions ?? ids.map((_, t) => pastLength + t));
  for (const name of s.inputNames.filter((n) => n.startsWith("past_key_values."))) {
    feeds[name] =
      o.past?.[name.replace("past_key_values.", "present.")] ??
      new ort.Tensor("float32", new Float32Array(0), f.cacheDims(0));
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

describe.each([gptNeo, bigcode(true), bigcode(false)])("the $name writer", (f) => {
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

  it("embeds the positions position_ids gives, not the ones it would count", async () => {
    const s = await session(f, false, {});
    const ids = SEQUENCES[0]!;
    const positions = ids.map((_, t) => 40 + 3 * t);
    const got = (await run(f, s, ids, { positions })).logits;
    expect(maxDiff(got, f.reference(ids, positions).logits)).toBeLessThanOrEqual(LOGITS_F32);
    expect(maxDiff(got, f.reference(ids).logits)).toBeGreaterThan(100 * LOGITS_F32);
  });

  it.each([true, false])(
    "decodes through the cache as the full forward computes (position_ids: %s)",
    async (hasIds) => {
      const withPast = await session(f, true, { positionIds: hasIds });
      const present = await session(f, false, { positionIds: hasIds, present: true });
      const first = hasIds ? 3 : 2;
      expect(withPast.inputNames.slice(first, first + f.pastNames.length)).toEqual(f.pastNames);
      expect(withPast.outputNames).toEqual(["logits", ...f.presentNames]);
      expect(present.outputNames).toEqual(withPast.outputNames);
      expect(present.inputNames).toEqual(withPast.inputNames.slice(0, first));
      for (const ids of SEQUENCES) {
        const prompt = ids.slice(0, -1);
        const start = await run(f, withPast, prompt);
        const noPast = await run(f, present, prompt);
        expect(maxDiff(start.logits, noPast.logits)).toBeLessThanOrEqual(LOGITS_F32);
        for (const [name, t] of Object.entries(start.presents)) {
          expect(t.dims).toEqual(f.cacheDims(prompt.length));
          expect(maxDiff(t.data as Float32Array, noPast.presents[name]!.data as Float32Array)).toBeLessThanOrEqual(
            LOGITS_F32,
          );
        }
        const next = await run(f, withPast, ids.slice(-1), { past: noPast.presents });
        expect(next.presents[f.presentNames.at(-1)!]!.dims).toEqual(f.cacheDims(ids.length));
        expect(maxDiff(next.logits, f.reference(ids).logits)).toBeLessThanOrEqual(LOGITS_F32);
      }
    },
  );

  it(`${f.paddingShifts ? "shifts" : "keeps"} left-padded positions without position_ids`, async () => {
    const s = await session(f, false, { positionIds: false });
    const ids = SEQUENCES[0]!;
    const pads = 3;
    const got = (
      await run(f, s, [...Array(pads).fill(1025), ...ids], { mask: [...Array(pads).fill(0), ...ids.map(() => 1)] })
    ).logits;
    const shifted = f.reference(
      ids,
      ids.map((_, t) => pads + t),
    ).logits;
    const unshifted = f.reference(ids).logits;
    expect(maxDiff(got, f.paddingShifts ? shifted : unshifted)).toBeLessThanOrEqual(LOGITS_F32);
    expect(maxDiff(shifted, unshifted)).toBeGreaterThan(100 * LOGITS_F32);
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
    if (f === gptNeo) expect(json).not.toHaveProperty("n_embd");
    else expect(json).not.toHaveProperty("hidden_size");
  });
});

describe("GPT-Neo's local attention", () => {
  it("drops keys window_size or more slots back in its local layers only", async () => {
    const s = await session(gptNeo, false, {});
    const ids = SEQUENCES[2]!;
    const got = (await run(gptNeo, s, ids)).logits;
    const unwindowed = referenceGptNeo({ ...neoConfig, window_size: 1000 }, neoWeights, ids).logits;
    expect(maxDiff(got, referenceGptNeo(neoConfig, neoWeights, ids).logits)).toBeLessThanOrEqual(LOGITS_F32);
    expect(maxDiff(got, unwindowed)).toBeGreaterThan(100 * LOGITS_F32);
    // With every layer global the window does nothing, so it is the local layer that applies it.
    const globalGraph = await ort.InferenceSession.create(
      Buffer.from(buildGptNeoOnnx({ ...neoConfig, attention_layers: ["global", "global"] }, neoWeights, false)),
    );
    expect(maxDiff((await run(gptNeo, globalGraph, ids)).logits, unwindowed)).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("writes attention_types as HF expands it for odd layer counts", () => {
    const c = gptNeoConfig({ layers: 3 });
    expect(c.attention_types).toEqual([
      [["global", "local"], 1],
      [["global"], 1],
    ]);
    expect(c.attention_layers).toEqual(["global", "local", "global"]);
    expect(gptNeoConfig().window_size).toBe(256);
  });
});

describe.each([true, false])("GPT-BigCode's fused cache (multi_query: %s)", (multiQuery) => {
  it("holds block 0's key in the first head_dim channels and its value in the rest", async () => {
    const c = gptBigcodeConfig(OPTIONS, multiQuery);
    const w = gptBigcodeWeights(c, OPTIONS.seed!);
    const f = bigcode(multiQuery);
    const ids = SEQUENCES[0]!;
    const { presents } = await run(f, await session(f, false, { present: true }), ids);
    const got = presents["present.0.key_value"]!.data as Float32Array;
    const want = bigcodeFirstKeyValue(c, w, ids);
    const heads = multiQuery ? 1 : c.n_head;
    const flat = new Float64Array(got.length);
    // Cache order: [1, seq, 2hd] or [1, heads, seq, 2hd].
    want.forEach((perHead, t) =>
      perHead.forEach((kv, h) => flat.set(kv, multiQuery ? t * 2 * HEAD_DIM : (h * ids.length + t) * 2 * HEAD_DIM)),
    );
    expect(want[0]!.length).toBe(heads);
    expect(maxDiff(got, flat)).toBeLessThanOrEqual(LOGITS_F32);
  });
});
