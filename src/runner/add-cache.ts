/**
 * A KV cache for decoders exported without one. Each attention of such a
 * graph is a `Softmax` between two matrix products: scores = Q · Kᵀ and
 * context = softmax(scores + bias) · V. Whatever the graph does before them
 * (rotary embeddings, repeated key/value heads), the keys reach the first
 * product with the sequence on their last axis and the values reach the
 * second with it on the axis before last. Concatenating the previous steps'
 * tensors there — new inputs `past_key_values.N.key/value`, the concatenations
 * output as `present.N.key/value` — lets a step run on its new token alone,
 * as with-past exports do.
 *
 * That is only right when the rest of the graph reads the cache's length from
 * the attention mask: the causal bias must span the whole mask and positions
 * must continue where the cache ends. A graph says nothing about that, so
 * generation tries the cache on a few prompts against full recomputation and
 * keeps it only where the tokens agree (see generate.ts).
 */
import { DataType, graphIndex, num, onnx, valueInfo, type GraphProto, type NodeProto } from "./onnx-graph.js";
import { isPastInput, isPresentOutput, pastInputName, presentOutputName } from "./kv-cache.js";

/** Operators between the scores' product and the Softmax: scale, bias, casts. */
const SCORE_OPS = new Set(["Add", "Sub", "Mul", "Div", "Where", "Cast", "Identity"]);
/** Operators that may sit between the Softmax and the product with V. */
const PASS_THROUGH = new Set(["Cast", "Identity", "Dropout"]);
const INT = onnx.AttributeProto.AttributeType.INT;
/** How far back from a Softmax its scores' product may lie. */
const SCORE_DEPTH = 6;

/** The heads and head size of the keys and values as the attention products see them (after repeating shared heads). */
export interface AttentionShape {
  heads: number;
  headDim: number;
}

/** The attention heads and head size config.json declares; undefined when it does not say. */
export function attentionShape(config: Record<string, unknown>): AttentionShape | undefined {
  const int = (v: unknown) => (typeof v === "number" && Number.isSafeInteger(v) && v > 0 ? v : undefined);
  const text = (config.text_config ?? {}) as Record<string, unknown>;
  const pick = (...keys: string[]) => keys.map((k) => int(config[k]) ?? int(text[k])).find((v) => v !== undefined);
  const heads = pick("num_attention_heads", "n_head", "num_heads");
  const hidden = pick("hidden_size", "n_embd", "d_model");
  const headDim = pick("head_dim") ?? (heads && hidden && hidden % heads === 0 ? hidden / heads : undefined);
  return heads && headDim ? { heads, headDim } : undefined;
}

/** The two products of one attention: scores (its input 1 the keys, transposed) and context (its input 1 the values). */
interface AttentionSite {
  scores: NodeProto;
  context: NodeProto;
}

function softmaxAxis(node: NodeProto, opset: number): number {
  const a = (node.attribute ?? []).find((x) => x.name === "axis");
  return a ? num(a.i) : opset >= 13 ? -1 : 1;
}

function findSites(graph: GraphProto, opset: number): AttentionSite[] | undefined {
  const { producer, consumers } = graphIndex(graph);
  const sites: AttentionSite[] = [];
  for (const softmax of graph.node ?? []) {
    if (/Attention$/.test(softmax.opType ?? "")) return undefined;
    if (softmax.opType !== "Softmax") continue;
    const axis = softmaxAxis(softmax, opset);
    if (axis !== -1 && axis !== 3) return undefined;
    // The one matrix product behind the Softmax's elementwise chain.
    const products = new Set<NodeProto>();
    const seen = new Set<string>();
    let frontier = [softmax.input![0]!];
    for (let depth = 0; depth < SCORE_DEPTH && frontier.length > 0; depth++) {
      const next: string[] = [];
      for (const t of frontier) {
        if (seen.has(t)) continue;
        seen.add(t);
        const p = producer.get(t);
        if (!p) continue;
        if (p.opType === "MatMul") products.add(p);
        else if (SCORE_OPS.has(p.opType ?? "") && !p.domain) next.push(...(p.input ?? []).filter(Boolean));
      }
      frontier = next;
    }
    if (products.size !== 1) return undefined;
    // The product that reads the probabilities.
    let probs = softmax.output![0]!;
    for (;;) {
      const readers = consumers.get(probs) ?? [];
      if (readers.length !== 1) return undefined;
      const r = readers[0]!;
      if (r.opType === "MatMul" && r.input![0] === probs) {
        sites.push({ scores: [...products][0]!, context: r });
        break;
      }
      if (!PASS_THROUGH.has(r.opType ?? "") || r.domain) return undefined;
      probs = r.output![0]!;
    }
  }
  return sites;
}

/**
 * Adds a KV cache to a graph without one, in place: per attention, inputs
 * `past_key_values.N.key` `[batch, heads, headDim, past]` (keys as the
 * scores' product reads them) and `past_key_values.N.value`
 * `[batch, heads, past, headDim]`, concatenated before the products and
 * output as `present.N.*`. Present outputs the graph already has (of the
 * prompt alone) are dropped. False, and the graph untouched, where the graph
 * has past inputs, no attention mask, fused attention operators, or not one
 * Softmax attention per decoder block.
 */
export function addKvCache(graph: GraphProto, opset: number, numLayers: number, shape: AttentionShape): boolean {
  const inputs = graph.input ?? [];
  if (inputs.some((v) => isPastInput(v.name!)) || !inputs.some((v) => v.name === "attention_mask")) return false;
  const sites = findSites(graph, opset);
  if (!sites || sites.length !== numLayers) return false;
  const floatType = (graph.output ?? []).find((o) => o.name === "logits")?.type?.tensorType?.elemType ?? DataType.FLOAT;
  const { heads, headDim } = shape;
  // Each concatenation goes right before the product that reads it, keeping the nodes in topological order.
  const before = new Map<NodeProto, NodeProto>();
  const added = [];
  const outputs = [];
  for (const [i, { scores, context }] of sites.entries()) {
    const key = { past: pastInputName(i, "key"), present: presentOutputName(i, "key") };
    const value = { past: pastInputName(i, "value"), present: presentOutputName(i, "value") };
    added.push(valueInfo(key.past, floatType, ["batch_size", heads, headDim, "past_sequence_length"]));
    added.push(valueInfo(value.past, floatType, ["batch_size", heads, "past_sequence_length", headDim]));
    outputs.push(valueInfo(key.present, floatType, ["batch_size", heads, headDim, "total_sequence_length"]));
    outputs.push(valueInfo(value.present, floatType, ["batch_size", heads, "total_sequence_length", headDim]));
    before.set(scores, { name: `/hsm/cache.${i}/key`, opType: "Concat", input: [key.past, scores.input![1]!], output: [key.present], attribute: [{ name: "axis", type: INT, i: -1 }] });
    before.set(context, { name: `/hsm/cache.${i}/value`, opType: "Concat", input: [value.past, context.input![1]!], output: [value.present], attribute: [{ name: "axis", type: INT, i: -2 }] });
    scores.input![1] = key.present;
    context.input![1] = value.present;
  }
  graph.node = (graph.node ?? []).flatMap((n) => (before.has(n) ? [before.get(n)!, n] : [n]));
  graph.input = [...inputs, ...added];
  graph.output = [...(graph.output ?? []).filter((o) => !isPresentOutput(o.name!)), ...outputs];
  return true;
}
