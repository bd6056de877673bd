/**
 * The tiny Llama as onnxruntime-genai's model builder lays it out (fp32, fp16
 * or int4 projections): no residual `Add` — each block's residual stream is
 * output 3 (`input_skip_bias_sum`) of the com.microsoft
 * `SkipSimplifiedLayerNormalization` that opens the next block
 * (`/model/layers.{l+1}/input_layernorm/SkipLayerNorm`), and the last one is
 * `/model/layers.{L}/final_norm_layernorm/SkipLayerNorm`, whose output 0 is the
 * post-norm state. Attention is com.microsoft `GroupQueryAttention` with the
 * rotary embedding inside (cos/sin caches), fed `seqlens_k` and
 * `total_sequence_length` computed from `attention_mask`; there is no
 * `position_ids` input. The folder has `genai_config.json` instead of
 * `config.json`, and the weights in `model.onnx.data`.
 */
import {
  DataType,
  decodeModel,
  encodeModel,
  GraphBuilder,
  valueInfo,
  type ModelProto,
  type ValueInfoProto,
} from "../onnx/graph.js";
import { pastInputName, presentOutputName } from "../onnx/kv-cache.js";
import {
  externalizeWeights,
  transpose,
  type LinearWriter,
  type LlamaConfig,
  type LlamaWeights,
  type ModelFiles,
} from "./llama.js";
import { convertToFloat16, linearWriter, type LinearFormat } from "./quantize.js";

const MS = "com.microsoft";

/** Marks the node just added as a com.microsoft contrib op. */
function markContrib(g: GraphBuilder): void {
  g.nodes.at(-1)!.domain = MS;
}

/** seqlens_k = sum(mask) − 1 and total_sequence_length = mask width, both int32, as the builder computes them. */
function attentionLengths(g: GraphBuilder): { seqlens: string; total: string } {
  const S = "/model/attn_mask_reformat/attn_mask_subgraph";
  const sum = g.op1(S, "ReduceSum", ["attention_mask", g.ints("/model/constants/axes_1", [1])], { keepdims: 0 });
  const seqlens = g.op1(S, "Cast", [g.op1(S, "Sub", [sum, g.ints("/model/constants/one", [1], [])])], {
    to: DataType.INT32,
  });
  const width = g.op1(S, "Gather", [g.op1(S, "Shape", ["attention_mask"]), g.ints("/model/constants/one", [1], [])], {
    axis: 0,
  });
  const total = g.op1(S, "Cast", [width], { to: DataType.INT32 });
  return { seqlens, total };
}

/** The rotary caches GroupQueryAttention reads, [max_positions, head_dim / 2]. */
function rotaryCaches(g: GraphBuilder, c: LlamaConfig): [cos: string, sin: string] {
  const hd = c.head_dim;
  const half = hd / 2;
  const cos = new Float32Array(c.max_position_embeddings * half);
  const sin = new Float32Array(c.max_position_embeddings * half);
  for (let p = 0; p < c.max_position_embeddings; p++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * Math.fround(1 / Math.pow(c.rope_theta, (2 * i) / hd)));
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  const cosCache = g.floats("cos_cache", cos, [c.max_position_embeddings, half]);
  const sinCache = g.floats("sin_cache", sin, [c.max_position_embeddings, half]);
  return [cosCache, sinCache];
}

/** What every block of {@link buildGenaiModel} reads; blocks add their present outputs to `outputs`. */
interface GenaiParts {
  g: GraphBuilder;
  c: LlamaConfig;
  linear: LinearWriter;
  eps: { float: number };
  seqlens: string;
  total: string;
  cosCache: string;
  sinCache: string;
  outputs: ValueInfoProto[];
}

/** The residual stream between blocks: the stream so far and the last MLP output not yet added to it. */
interface Stream {
  residual: string;
  pending: string | undefined;
}

/** Layer `i`'s attention of the normed stream `h` (projections, GroupQueryAttention); returns o_proj's output. */
function groupQueryAttention(p: GenaiParts, lw: LlamaWeights["layers"][number], i: number, h: string): string {
  const { g, c, linear } = p;
  const { hidden_size: d, num_attention_heads: H, num_key_value_heads: KV, head_dim: hd } = c;
  const A = `/model/layers.${i}/attn`;
  const pre = `model.layers.${i}`;
  const q = linear(g, `${A}/q_proj`, h, `${pre}.attn.q_proj.weight`, lw.q, H * hd, d);
  const k = linear(g, `${A}/k_proj`, h, `${pre}.attn.k_proj.weight`, lw.k, KV * hd, d);
  const v = linear(g, `${A}/v_proj`, h, `${pre}.attn.v_proj.weight`, lw.v, KV * hd, d);
  const name = `${A}/GroupQueryAttention`;
  const { seqlens, total, cosCache, sinCache } = p;
  g.nodes.push({
    name,
    opType: "GroupQueryAttention",
    domain: MS,
    input: [q, k, v, pastInputName(i, "key"), pastInputName(i, "value"), seqlens, total, cosCache, sinCache],
    output: [`${name}/output_0`, presentOutputName(i, "key"), presentOutputName(i, "value")],
    attribute: [
      { name: "num_heads", type: 2, i: H },
      { name: "kv_num_heads", type: 2, i: KV },
      { name: "do_rotary", type: 2, i: 1 },
      { name: "rotary_interleaved", type: 2, i: 0 },
      { name: "local_window_size", type: 2, i: -1 },
      { name: "scale", type: 1, f: 1 / Math.sqrt(hd) },
    ],
  });
  for (const kind of ["key", "value"] as const) {
    p.outputs.push(
      valueInfo(presentOutputName(i, kind), DataType.FLOAT, ["batch_size", KV, "total_sequence_length", hd]),
    );
  }
  return linear(g, `${A}/o_proj`, `${name}/output_0`, `${pre}.attn.o_proj.weight`, lw.o, d, H * hd);
}

/**
 * Decoder block `i`: its input norm adds the last block's MLP output to the
 * stream (a plain norm in block 0), attention, then the post-attention norm
 * adds attention's; the block's MLP output is left pending for the next norm.
 */
function genaiBlock(p: GenaiParts, lw: LlamaWeights["layers"][number], i: number, s: Stream): Stream {
  const { g, c, linear, eps } = p;
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const L = `/model/layers.${i}`;
  const pre = `model.layers.${i}`;
  let { residual } = s;
  let h: string;
  if (s.pending === undefined) {
    const weight = g.floats(`${pre}.input_layernorm.weight`, lw.inputNorm, [d]);
    h = g.op1(`${L}/input_layernorm`, "SimplifiedLayerNormalization", [residual, weight], { axis: -1, epsilon: eps });
  } else {
    const weight = g.floats(`${pre}.input_layernorm.weight`, lw.inputNorm, [d]);
    const [normed, , , sumOut] = g.op(
      `${L}/input_layernorm`,
      "SkipSimplifiedLayerNormalization",
      [s.pending, residual, weight],
      { epsilon: eps },
      4,
    );
    markContrib(g);
    h = normed!;
    residual = sumOut!;
  }
  const attnOut = groupQueryAttention(p, lw, i, h);
  const postWeight = g.floats(`${pre}.post_attention_layernorm.weight`, lw.postNorm, [d]);
  const [h2, , , x1] = g.op(
    `${L}/post_attention_layernorm`,
    "SkipSimplifiedLayerNormalization",
    [attnOut, residual, postWeight],
    { epsilon: eps },
    4,
  );
  markContrib(g);
  residual = x1!;
  const M = `${L}/mlp`;
  const gate = linear(g, `${M}/gate_proj`, h2!, `${pre}.mlp.gate_proj.weight`, lw.gate, I, d);
  const up = linear(g, `${M}/up_proj`, h2!, `${pre}.mlp.up_proj.weight`, lw.up, I, d);
  const act = g.op1(`${M}/act_fn`, "Mul", [gate, g.op1(`${M}/act_fn`, "Sigmoid", [gate])]);
  const gated = g.op1(M, "Mul", [act, up]);
  const pending = linear(g, `${M}/down_proj`, gated, `${pre}.mlp.down_proj.weight`, lw.down, d, I);
  return { residual, pending };
}

/** The final norm (output 0 only: the post-norm state), the builder's node names, and the LM head writing `logits`. */
function finalNormAndHead(p: GenaiParts, w: LlamaWeights, s: Stream): void {
  const { g, c, eps } = p;
  const d = c.hidden_size;
  const [final] = g.op(
    `/model/layers.${c.num_hidden_layers}/final_norm_layernorm`,
    "SkipSimplifiedLayerNormalization",
    [s.pending!, s.residual, g.floats("model.norm.weight", w.norm, [d])],
    { epsilon: eps },
    1,
  );
  g.nodes.at(-1)!.name = `/model/layers.${c.num_hidden_layers}/final_norm_layernorm/SkipLayerNorm`;
  markContrib(g);
  for (const n of g.nodes) {
    if (n.opType !== "SkipSimplifiedLayerNormalization") continue;
    n.name = n.name!.replace(/SkipSimplifiedLayerNormalization$/, "SkipLayerNorm");
    // mean and inv_std_var are not computed, as in the builder's graphs.
    if (n.output!.length === 4) n.output = [n.output![0]!, "", "", n.output![3]!];
  }
  for (const n of g.nodes) {
    if (n.opType !== "SimplifiedLayerNormalization") continue;
    n.name = n.name!.replace(/SimplifiedLayerNormalization$/, "LayerNorm");
  }
  const head = g.floats("lm_head.weight", transpose(w.lmHead, c.vocab_size, d), [d, c.vocab_size]);
  g.nodes.push({ name: "/lm_head/MatMul", opType: "MatMul", input: [final!, head], output: ["logits"] });
}

/** The ONNX model of a genai build (weights inline; see {@link genaiFiles} for the folder). */
export function buildGenaiModel(c: LlamaConfig, w: LlamaWeights, linear: LinearWriter): ModelProto {
  const g = new GraphBuilder();
  const d = c.hidden_size;
  const { seqlens, total } = attentionLengths(g);
  const [cosCache, sinCache] = rotaryCaches(g, c);
  const inputs = [
    valueInfo("input_ids", DataType.INT64, ["batch_size", "sequence_length"]),
    valueInfo("attention_mask", DataType.INT64, ["batch_size", "total_sequence_length"]),
  ];
  const outputs = [valueInfo("logits", DataType.FLOAT, ["batch_size", "sequence_length", c.vocab_size])];
  // Keys first, then values, as new builds order them.
  for (const kind of ["key", "value"] as const) {
    for (let i = 0; i < c.num_hidden_layers; i++) {
      const dims = ["batch_size", c.num_key_value_heads, "past_sequence_length", c.head_dim];
      inputs.push(valueInfo(pastInputName(i, kind), DataType.FLOAT, dims));
    }
  }
  const eps = { float: c.rms_norm_eps };
  const p: GenaiParts = { g, c, linear, eps, seqlens, total, cosCache, sinCache, outputs };
  const embedWeight = g.floats("model.embed_tokens.weight", w.embed, [c.vocab_size, d]);
  const embedded = g.op1("/model/embed_tokens", "Gather", [embedWeight, "input_ids"], { axis: 0 });
  let stream: Stream = { residual: embedded, pending: undefined };
  w.layers.forEach((lw, i) => (stream = genaiBlock(p, lw, i, stream)));
  finalNormAndHead(p, w, stream);
  return {
    irVersion: 8,
    producerName: "hsm tiny-llama (onnxruntime-genai layout)",
    opsetImport: [
      { domain: "", version: 17 },
      { domain: MS, version: 1 },
    ],
    graph: { name: "main_graph", node: g.nodes, initializer: g.initializers, input: inputs, output: outputs },
  } as ModelProto;
}

/** The genai builds `hsm make-model --style genai` writes: fp32, fp16 (float32 inputs and outputs, as CPU builds), fp16-io (float16 KV cache and logits, as CUDA builds), int4. */
export type GenaiPrecision = "fp32" | "fp16" | "fp16-io" | "int4";

/** A genai folder: `model.onnx`, `model.onnx.data`, `genai_config.json` (no config.json). */
export function genaiFiles(precision: GenaiPrecision = "fp32"): ModelFiles {
  return (c, w) => {
    const linear: LinearFormat = precision === "int4" ? "int4" : "float32";
    const model = decodeModel(encodeModel(buildGenaiModel(c, w, linearWriter(linear))));
    if (precision === "fp16" || precision === "fp16-io") convertToFloat16(model, precision === "fp16");
    const data = externalizeWeights(model, "model.onnx.data");
    const genai = {
      model: {
        bos_token_id: c.bos_token_id,
        context_length: c.max_position_embeddings,
        decoder: {
          session_options: { log_id: "onnxruntime-genai", provider_options: [] },
          filename: "model.onnx",
          head_size: c.head_dim,
          hidden_size: c.hidden_size,
          inputs: {
            input_ids: "input_ids",
            attention_mask: "attention_mask",
            past_key_names: "past_key_values.%d.key",
            past_value_names: "past_key_values.%d.value",
          },
          outputs: { logits: "logits", present_key_names: "present.%d.key", present_value_names: "present.%d.value" },
          num_attention_heads: c.num_attention_heads,
          num_hidden_layers: c.num_hidden_layers,
          num_key_value_heads: c.num_key_value_heads,
        },
        eos_token_id: c.eos_token_id,
        pad_token_id: Array.isArray(c.eos_token_id) ? c.eos_token_id[0] : c.eos_token_id,
        type: "llama",
        vocab_size: c.vocab_size,
      },
      search: {
        do_sample: false,
        max_length: c.max_position_embeddings,
        num_beams: 1,
        past_present_share_buffer: false,
      },
    };
    return { "model.onnx": encodeModel(model), ...data, "genai_config.json": JSON.stringify(genai, null, 2) + "\n" };
  };
}
