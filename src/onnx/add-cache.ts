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
 * must continue where the cache ends. A graph that counts positions from the
 * tokens it is given alone gets no cache (see positionsRestart); for the rest
 * the graph says nothing, so generation tries the cache on a few prompts
 * against full recomputation and keeps it only where the tokens agree (see
 * generate.ts).
 */
import { DataType, graphIndex, num, onnx, valueInfo, type GraphProto, type NodeProto } from "./graph.js";
import { isPastInput, isPresentOutput, pastInputName, presentOutputName } from "./kv-cache.js";

/**
 * Operators between the scores' product and the Softmax: scale, bias, casts, and Gemma2's soft-capping
 * tanh(s / cap) · cap. All are elementwise, so each key's score stays on its own column when the cache lengthens it.
 */
const SCORE_OPS = new Set(["Add", "Sub", "Mul", "Div", "Where", "Cast", "Identity", "Tanh"]);
/** Operators that may sit between the Softmax and the product with V. */
const PASS_THROUGH = new Set(["Cast", "Identity", "Dropout"]);
const INT = onnx.AttributeProto.AttributeType.INT;
/** How far back from a Softmax its scores' product may lie (a scale, a soft-cap's three nodes, the bias, casts). */
const SCORE_DEPTH = 8;

/** The heads and head size of the keys and values as the attention products see them (after repeating shared heads). */
export interface AttentionShape {
  heads: number;
  /** Heads of the keys and values before grouped-query attention repeats them. */
  kvHeads: number;
  headDim: number;
}

/**
 * The attention heads and head size config.json declares; undefined when it does not say. A multi-query model
 * (GPT-BigCode's or Falcon's `multi_query`, Falcon only without its new decoder architecture) has one key/value
 * head, whatever `num_kv_heads` says.
 */
export function attentionShape(config: Record<string, unknown>): AttentionShape | undefined {
  const int = (v: unknown) => (typeof v === "number" && Number.isSafeInteger(v) && v > 0 ? v : undefined);
  const text = (config.text_config ?? {}) as Record<string, unknown>;
  const pick = (...keys: string[]) => keys.map((k) => int(config[k]) ?? int(text[k])).find((v) => v !== undefined);
  const heads = pick("num_attention_heads", "n_head", "num_heads");
  const hidden = pick("hidden_size", "n_embd", "d_model");
  const headDim = pick("head_dim") ?? (heads && hidden && hidden % heads === 0 ? hidden / heads : undefined);
  const multiQuery = (config.multi_query ?? text.multi_query) === true;
  const newArchitecture = (config.new_decoder_architecture ?? text.new_decoder_architecture) === true;
  const kvHeads =
    multiQuery && !newArchitecture ? 1 : (pick("num_key_value_heads", "n_head_kv", "num_kv_heads") ?? heads);
  return heads && kvHeads && headDim ? { heads, kvHeads, headDim } : undefined;
}

/**
 * Whether the graph counts positions from the tokens it is given alone: a `Range` whose bounds come from
 * `input_ids` (its length, or the embedding's) and not from `attention_mask`. Fed one new token after a cache,
 * such a graph would put it at position 0 (optimum's legacy GPT-2 decoder counts `0…T−1` with no past; torch
 * exports count `cache_position` so), so no cache is added to it.
 */
export function positionsRestart(graph: GraphProto): boolean {
  const { producer } = graphIndex(graph);
  const reached = (start: readonly string[]): Set<string> => {
    const seen = new Set<string>();
    const inputs = new Set<string>();
    const stack = [...start];
    while (stack.length > 0) {
      const t = stack.pop()!;
      if (!t || seen.has(t)) continue;
      seen.add(t);
      const p = producer.get(t);
      if (p) stack.push(...(p.input ?? []));
      else inputs.add(t);
    }
    return inputs;
  };
  return (graph.node ?? []).some((n) => {
    if (n.opType !== "Range") return false;
    const from = reached(n.input ?? []);
    return from.has("input_ids") && !from.has("attention_mask") && !from.has("position_ids");
  });
}

/** The two products of one attention: scores (its input 1 the keys, transposed) and context (its input 1 the values). */
interface AttentionSite {
  scores: NodeProto;
  context: NodeProto;
}

/** Where a cache joins the graph: input `index` of `reader`, along `axis` (the sequence's); `kv` where heads are not repeated yet. */
interface CachePoint {
  reader: NodeProto;
  index: number;
  axis: -1 | -2;
  kv: boolean;
}

/**
 * Moves a cache point back past what only rearranges the sequence's tensor:
 * the keys' transpose (`[…, S, d]` → `[…, d, S]`) and grouped-query
 * attention's repetition of key/value heads (Unsqueeze → Expand → Reshape, as
 * HuggingFace's repeat_kv exports), so that the cache holds each key/value
 * head once, sequence on the axis before last.
 */
function earliestPoint(
  point: CachePoint,
  producer: ReadonlyMap<string, NodeProto>,
  consumers: ReadonlyMap<string, NodeProto[]>,
): CachePoint {
  const from = (p: CachePoint) => producer.get(p.reader.input![p.index]!);
  const only = (n: NodeProto) => (consumers.get(n.output![0]!) ?? []).length === 1;
  let p = point;
  const t = from(p);
  const perm =
    t?.opType === "Transpose" ? (t.attribute ?? []).find((a) => a.name === "perm")?.ints?.map(num) : undefined;
  if (p.axis === -1 && t && only(t) && perm?.join() === "0,1,3,2") p = { reader: t, index: 0, axis: -2, kv: false };
  const reshape = from(p);
  const expand = reshape?.opType === "Reshape" && only(reshape) ? producer.get(reshape.input![0]!) : undefined;
  const unsqueeze = expand?.opType === "Expand" && only(expand) ? producer.get(expand.input![0]!) : undefined;
  if (p.axis === -2 && unsqueeze?.opType === "Unsqueeze" && only(unsqueeze))
    p = { reader: unsqueeze, index: 0, axis: -2, kv: true };
  return p;
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
    // A mixture of experts' router (Mixtral's): its probabilities pick experts, no values.
    if ((consumers.get(softmax.output![0]!) ?? []).some((r) => r.opType === "TopK")) continue;
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
 * `past_key_values.N.key` and `.value` concatenated with the keys and values
 * along the sequence and output as `present.N.*` — `[batch, kvHeads, past,
 * headDim]` before repeated heads where the graph shows them (see
 * {@link earliestPoint}), else as the products read them (keys
 * `[batch, heads, headDim, past]`). Present outputs the graph already has (of the
 * prompt alone) are dropped. False, and the graph untouched, where the graph
 * has past inputs, no attention mask, fused attention operators, or not one
 * Softmax attention per decoder block (a router's Softmax, read by `TopK`, is none).
 */
export function addKvCache(graph: GraphProto, opset: number, numLayers: number, shape: AttentionShape): boolean {
  const inputs = graph.input ?? [];
  if (inputs.some((v) => isPastInput(v.name!)) || !inputs.some((v) => v.name === "attention_mask")) return false;
  if (positionsRestart(graph)) return false;
  const sites = findSites(graph, opset);
  if (!sites || sites.length !== numLayers) return false;
  const floatType = (graph.output ?? []).find((o) => o.name === "logits")?.type?.tensorType?.elemType ?? DataType.FLOAT;
  const { producer, consumers } = graphIndex(graph);
  // Each concatenation goes right before the node that reads it, keeping the nodes in topological order.
  const before = new Map<NodeProto, NodeProto[]>();
  const added = [];
  const outputs = [];
  for (const [i, { scores, context }] of sites.entries()) {
    for (const [kind, start] of [
      ["key", { reader: scores, index: 1, axis: -1, kv: false }],
      ["value", { reader: context, index: 1, axis: -2, kv: false }],
    ] as const) {
      const { reader, index, axis, kv } = earliestPoint(start, producer, consumers);
      const past = pastInputName(i, kind);
      const present = presentOutputName(i, kind);
      const heads = kv ? shape.kvHeads : shape.heads;
      const dims = (length: string) =>
        axis === -1 ? ["batch_size", heads, shape.headDim, length] : ["batch_size", heads, length, shape.headDim];
      added.push(valueInfo(past, floatType, dims("past_sequence_length")));
      outputs.push(valueInfo(present, floatType, dims("total_sequence_length")));
      const concat = {
        name: `/hsm/cache.${i}/${kind}`,
        opType: "Concat",
        input: [past, reader.input![index]!],
        output: [present],
        attribute: [{ name: "axis", type: INT, i: axis }],
      };
      before.set(reader, [...(before.get(reader) ?? []), concat]);
      reader.input![index] = present;
    }
  }
  graph.node = (graph.node ?? []).flatMap((n) => [...(before.get(n) ?? []), n]);
  graph.input = [...inputs, ...added];
  graph.output = [...(graph.output ?? []).filter((o) => !isPresentOutput(o.name!)), ...outputs];
  return true;
}
