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
 * A graph written without a cache also takes lengths from the new tokens
 * where a with-past export takes them from the cache: the keys' length read
 * off the keys (transformers slices its rotary tables and GPT-2's causal
 * buffer to it), and `Range`s over `input_ids`' length (the query positions of
 * a causal mask, positions counted from 0). Without a cache the two agree;
 * with one the keys' length must count the past too and the query positions
 * must start where the past ends; so must the rows of a `Trilu` over the
 * mask's columns (a sliding window). The rewrite makes all so (see
 * {@link growKeyLengths}, {@link shiftQueryRanges} and
 * {@link shiftTriluDiagonals}), so the added cache
 * computes what a with-past export of the same model computes. Generation
 * still tries it on a few prompts against full recomputation (generate.ts).
 */
import {
  DataType,
  graphIndex,
  int64Tensor,
  int64Values,
  num,
  onnx,
  valueInfo,
  type GraphProto,
  type NodeProto,
} from "./graph.js";
import { isPastInput, isPresentOutput, pastInputName, presentOutputName } from "./kv-cache.js";
import { CONFIG_KEYS } from "./config-keys.js";

/**
 * Operators between the scores' product and the Softmax: scale, bias, casts, clamps (OPT's Max), Gemma2's soft-capping
 * tanh(s / cap) · cap. All are elementwise, so each key's score stays on its own column when the cache lengthens it.
 */
const SCORE_OPS = new Set(["Add", "Sub", "Mul", "Div", "Where", "Cast", "Identity", "Tanh", "Max", "Min"]);
/** Operators that may sit between the Softmax and the product with V. */
const PASS_THROUGH = new Set(["Cast", "Identity", "Dropout"]);

/**
 * A `Reshape` whose target shape the graph computes (from the tensors' own `Shape`s, which the rewrite grows)
 * rather than stores: GPT-BigCode's multi-query scores, `[B, T·H, S]` viewed `[B, T, H, S]` for the mask and back
 * for the product with the values. The keys' axis stays last and follows the keys' length.
 */
function computedReshape(n: NodeProto, producer: ReadonlyMap<string, NodeProto>): boolean {
  const shape = n.input?.[1];
  return (
    n.opType === "Reshape" && !n.domain && !!shape && producer.has(shape) && producer.get(shape)!.opType !== "Constant"
  );
}
const INT = onnx.AttributeProto.AttributeType.INT;
/** The added cache's `Slice`s take their bounds as inputs, as `Slice` does from opset 10 of the default domain. */
const MIN_OPSET = 10;
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
  const pick = (...keys: readonly string[]) =>
    keys.map((k) => int(config[k]) ?? int(text[k])).find((v) => v !== undefined);
  const heads = pick(...CONFIG_KEYS.heads);
  const hidden = pick(...CONFIG_KEYS.hidden);
  const headDim = pick("head_dim") ?? (heads && hidden && hidden % heads === 0 ? hidden / heads : undefined);
  const multiQuery = (config.multi_query ?? text.multi_query) === true;
  const newArchitecture = (config.new_decoder_architecture ?? text.new_decoder_architecture) === true;
  const kvHeads = multiQuery && !newArchitecture ? 1 : (pick(...CONFIG_KEYS.kvHeads) ?? heads);
  return heads && kvHeads && headDim ? { heads, kvHeads, headDim } : undefined;
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
  /** 3 where the keys have no heads' axis (GPT-BigCode's multi-query `[B, S, hd]`), else 4. */
  rank: 3 | 4;
  /** `reader` is a Reshape that merges batch and heads after the cache joins: its target's sequence is then `-1`. */
  merged?: boolean;
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
  // Read by one node besides Shapes: a Shape after the join reads the past's length too, as a with-past export's.
  const only = (n: NodeProto) => (consumers.get(n.output![0]!) ?? []).filter((r) => r.opType !== "Shape").length === 1;
  let p = point;
  const t = from(p);
  const perm =
    t?.opType === "Transpose" ? (t.attribute ?? []).find((a) => a.name === "perm")?.ints?.map(num) : undefined;
  if (p.axis === -1 && t && only(t) && perm?.join() === "0,1,3,2") p = { ...p, reader: t, index: 0, axis: -2 };
  if (p.axis === -1 && t && only(t) && perm?.join() === "0,2,1") p = { ...p, reader: t, index: 0, axis: -2, rank: 3 };
  const reshape = from(p);
  const expand = reshape?.opType === "Reshape" && only(reshape) ? producer.get(reshape.input![0]!) : undefined;
  const unsqueeze = expand?.opType === "Expand" && only(expand) ? producer.get(expand.input![0]!) : undefined;
  if (p.axis === -2 && unsqueeze?.opType === "Unsqueeze" && only(unsqueeze))
    return { ...p, reader: unsqueeze, index: 0, axis: -2, kv: true };
  // Batch and heads merged into one axis (BLOOM's [B·H, hd, S] keys and [B·H, S, hd] values, as transformers
  // writes them): the cache joins the heads' tensor the Reshape merges, and the Reshape keeps the sequence's length.
  const heads = reshape?.opType === "Reshape" && only(reshape) ? reshape.input![0]! : undefined;
  if (heads && computedReshape(reshape!, producer) && headsTensor(heads, producer))
    return { ...p, reader: reshape!, index: 0, rank: 4, merged: true };
  return p;
}

/**
 * Whether `t` has a heads' axis beside the batch's: it comes from a Transpose of rank 4 (transformers' `permute`
 * or `transpose(1, 2)` of `[B, T, H, hd]`) through operators that keep the layout, rotary embeddings' halves
 * joined on the features included.
 */
function headsTensor(t: string, producer: ReadonlyMap<string, NodeProto>): boolean {
  for (let depth = 0; depth < 16; depth++) {
    const n = producer.get(t);
    if (!n || n.domain) return false;
    if (n.opType === "Transpose") return (n.attribute ?? []).find((a) => a.name === "perm")?.ints?.length === 4;
    if (!SAME_LAYOUT.has(n.opType ?? "") && n.opType !== "Concat" && n.opType !== "Slice") return false;
    t = n.input![0]!;
  }
  return false;
}

/** Operators a key or value passes through between its projection and its product, and the inputs they carry it in. */
const CARRIERS: Record<string, "all" | "first"> = {
  Add: "all",
  Sub: "all",
  Mul: "all",
  Div: "all",
  Neg: "all",
  Cast: "all",
  Identity: "all",
  Concat: "all",
  Transpose: "first",
  Reshape: "first",
  Slice: "first",
  Split: "first",
  Squeeze: "first",
  Unsqueeze: "first",
  Expand: "first",
  Tile: "first",
};

/**
 * Whether a key or value tensor that joins the cache (no repetition of heads found right before its product)
 * carries every query head: true where the graph shares key/value heads by repeating them (an `Expand` or `Tile`
 * on its way from the projection) or has as many of them as query heads; false where the product broadcasts them
 * (Falcon's multi-query keys, one head against all the queries'), and then they have the key/value heads' count.
 */
function repeated(tensor: string, shape: AttentionShape, producer: ReadonlyMap<string, NodeProto>): boolean {
  // Only one key/value head broadcasts in a matrix product; more must have been repeated to the query heads'.
  if (shape.kvHeads === shape.heads || shape.kvHeads > 1) return true;
  const seen = new Set<string>();
  const stack = [tensor];
  while (stack.length > 0) {
    const t = stack.pop()!;
    if (!t || seen.has(t)) continue;
    seen.add(t);
    const p = producer.get(t);
    const carry = p && !p.domain ? CARRIERS[p.opType ?? ""] : undefined;
    if (!p || !carry) continue;
    if (p.opType === "Expand" || p.opType === "Tile") return true;
    stack.push(...(carry === "all" ? (p.input ?? []) : (p.input ?? []).slice(0, 1)));
  }
  return false;
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
        else if (computedReshape(p, producer)) next.push(p.input![0]!);
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
      if ((!PASS_THROUGH.has(r.opType ?? "") || r.domain) && !computedReshape(r, producer)) return undefined;
      probs = r.output![0]!;
    }
  }
  return sites;
}

/** The graph inputs a tensor is computed from, and the operators on the way. */
function ancestry(producer: ReadonlyMap<string, NodeProto>, start: readonly string[]) {
  const seen = new Set<string>();
  const inputs = new Set<string>();
  const ops = new Set<string>();
  const stack = [...start];
  while (stack.length > 0) {
    const t = stack.pop()!;
    if (!t || seen.has(t)) continue;
    seen.add(t);
    const p = producer.get(t);
    if (p) {
      ops.add(p.opType ?? "");
      stack.push(...(p.input ?? []));
    } else inputs.add(t);
  }
  return { inputs, ops };
}

/** One tensor the cache joins: the new tokens' keys or values, the past input before them, the sequence's axis. */
interface JoinedCache {
  tensor: string;
  past: string;
  /** The sequence's axis in the past and joined tensors. */
  seqAxis: number;
  rank: 3 | 4;
  /** Prefix of the nodes added for it. */
  name: string;
}

/** Elementwise operators through which the keys keep their layout (rotary embeddings, scales, casts). */
const SAME_LAYOUT = new Set(["Add", "Sub", "Mul", "Div", "Neg", "Cast", "Identity"]);

/**
 * Every `Shape` of the keys or values the cache joins (or of what they are computed from elementwise, by a split
 * and join on the features or by a transpose: the keys before their rotary embedding, or before their transpose
 * for the product) gets the past's length added on the sequence's axis, wherever that axis is in the tensor it
 * reads: the graph reads the keys' length there to slice its rotary tables, a causal buffer, ALiBi biases or the
 * repetition of shared heads, and with a cache that length is the past's and the new tokens'. A with-past export
 * adds the past's length the same way.
 */
function growKeyLengths(graph: GraphProto, points: readonly JoinedCache[], before: Map<NodeProto, NodeProto[]>): void {
  const { producer, consumers } = graphIndex(graph);
  const order = new Map((graph.node ?? []).map((n, i) => [n, i]));
  const initializers = new Map((graph.initializer ?? []).map((t) => [t.name!, t]));
  const ints = (t: string | undefined) => {
    const n = t ? producer.get(t) : undefined;
    return int64Values(
      n?.opType === "Constant" ? (n.attribute?.find((a) => a.name === "value")?.t ?? undefined) : initializers.get(t!),
    );
  };
  for (const p of points) {
    // Each tensor the joined one is computed from without a change of sequence, and its sequence's axis there.
    const axisOf = new Map<string, number>();
    const stack: [string, number][] = [[p.tensor, p.seqAxis]];
    while (stack.length > 0) {
      const [t, axis] = stack.pop()!;
      if (axisOf.has(t)) continue;
      axisOf.set(t, axis);
      const n = producer.get(t);
      // The same keys transposed another way beside (a trace folds `transpose(1, 2)` and `transpose(-1, -2)` into one
      // Transpose and reads the keys' length from a second one of the tensor before them, as MPT's does).
      for (const c of consumers.get(t) ?? []) {
        const perm = (c.attribute ?? []).find((a) => a.name === "perm")?.ints?.map(num);
        if (c.opType === "Transpose" && !c.domain && perm?.length === p.rank)
          stack.push([c.output![0]!, perm.indexOf(axis)]);
      }
      if (!n || n.domain) continue;
      // The features' axis, where the sequence is not last: rotary embeddings split the keys there and join them again.
      const onFeatures = (axes: number[] | undefined) =>
        axis !== p.rank - 1 && !!axes?.length && axes.every((a) => (a + p.rank) % p.rank === p.rank - 1);
      const inputs = (n.input ?? []).filter(Boolean);
      if (SAME_LAYOUT.has(n.opType ?? "")) stack.push(...inputs.map((i): [string, number] => [i, axis]));
      const along = num((n.attribute ?? []).find((a) => a.name === "axis")?.i ?? 0);
      // A fused key and value split apart on their features (GPT-BigCode's key_value): the same sequence's axis.
      if (n.opType === "Split" && (along + p.rank) % p.rank === p.rank - 1) stack.push([n.input![0]!, axis]);
      if (n.opType === "Concat" && onFeatures([along])) stack.push(...inputs.map((i): [string, number] => [i, axis]));
      if (n.opType === "Slice" && onFeatures(ints(n.input![3]))) stack.push([n.input![0]!, axis]);
      // The keys before their transpose for the product (MPT reads their length there): the axis it moved.
      const perm = (n.attribute ?? []).find((a) => a.name === "perm")?.ints?.map(num);
      if (n.opType === "Transpose" && perm?.length === p.rank) stack.push([n.input![0]!, perm[axis]!]);
    }
    // In the graph's order: the first computes the past's length that the others read.
    const shapes = [...axisOf]
      .flatMap(([t, axis]) =>
        (consumers.get(t) ?? []).filter((n) => n.opType === "Shape").map((shape) => ({ shape, axis })),
      )
      .sort((a, b) => order.get(a.shape)! - order.get(b.shape)!);
    if (shapes.length === 0) continue;
    const onehot = `${p.name}/seq_axis`;
    (graph.initializer ??= []).push(
      int64Tensor(
        onehot,
        Array.from({ length: p.rank }, (_, a) => (a === p.seqAxis ? 1 : 0)),
      ),
    );
    const pastShape = `${p.name}/past_shape`;
    const pastLength = `${p.name}/past_length`;
    const first: NodeProto[] = [
      { name: pastShape, opType: "Shape", input: [p.past], output: [pastShape] },
      { name: pastLength, opType: "Mul", input: [pastShape, onehot], output: [pastLength] },
    ];
    /** The past's length on `axis` of a rank-`p.rank` shape, the rest zero: computed before the node that first needs it. */
    const lengthOn = (axis: number, at: NodeProto[]): string => {
      if (axis === p.seqAxis) return pastLength;
      const name = `${p.name}/past_length_${axis}`;
      if (!graph.initializer!.some((t) => t.name === `${name}/axis`)) {
        graph.initializer!.push(
          int64Tensor(`${name}/at`, [p.seqAxis], []),
          int64Tensor(
            `${name}/axis`,
            Array.from({ length: p.rank }, (_, a) => (a === axis ? 1 : 0)),
          ),
        );
        at.push(
          { name: `${name}/n`, opType: "Gather", input: [pastShape, `${name}/at`], output: [`${name}/n`] },
          { name, opType: "Mul", input: [`${name}/n`, `${name}/axis`], output: [name] },
        );
      }
      return name;
    };
    for (const [j, { shape: s, axis }] of shapes.entries()) {
      const own = `${p.name}/shape_${j}`;
      const attr = (k: string) => (s.attribute ?? []).find((a) => a.name === k);
      const start = attr("start");
      const end = attr("end");
      const grown = `${own}/grown`;
      const added: NodeProto[] = j === 0 ? [...first] : [];
      const length = lengthOn(axis, added);
      added.push(
        { name: `${own}/full`, opType: "Shape", input: [s.input![0]!], output: [`${own}/full`] },
        { name: grown, opType: "Add", input: [`${own}/full`, length], output: [grown] },
      );
      before.set(s, [...(before.get(s) ?? []), ...added]);
      if (start || end) {
        const bounds = `${own}/bounds`;
        (graph.initializer ??= []).push(
          int64Tensor(`${bounds}/start`, [start ? num(start.i) : 0]),
          int64Tensor(`${bounds}/end`, [end ? num(end.i) : p.rank]),
        );
        Object.assign(s, { opType: "Slice", input: [grown, `${bounds}/start`, `${bounds}/end`], attribute: [] });
      } else Object.assign(s, { opType: "Identity", input: [grown], attribute: [] });
    }
  }
}

/**
 * Every `Range` whose bounds come from `input_ids`' length alone (and not from the attention mask, position ids or
 * the cache) starts and ends the past's length later: it counts the new tokens' positions, which start where the
 * past ends (query rows of a causal mask built from `torch.arange`, positions counted from 0 as optimum's legacy
 * GPT-2 decoder counts them), as a with-past export's `arange(past, past + T)` does.
 */
function shiftQueryRanges(
  graph: GraphProto,
  opset: number,
  pastLength: () => string,
  before: Map<NodeProto, NodeProto[]>,
): void {
  const { producer } = graphIndex(graph);
  const ranges = (graph.node ?? []).filter((n) => {
    if (n.opType !== "Range" || n.domain) return false;
    const from = ancestry(producer, n.input ?? []).inputs;
    return (
      from.has("input_ids") && ![...from].some((t) => t === "attention_mask" || t === "position_ids" || isPastInput(t))
    );
  });
  for (const [j, r] of ranges.entries()) {
    const own = `/hsm/cache/range_${j}`;
    const length = `${own}/past_length`;
    const added: NodeProto[] = [
      // The bounds' own type (Range takes int32, int64 or floats alike); before CastLike, torch's int64.
      opset >= 15
        ? { name: length, opType: "CastLike", input: [pastLength(), r.input![0]!], output: [length] }
        : { name: length, opType: "Identity", input: [pastLength()], output: [length] },
      { name: `${own}/start`, opType: "Add", input: [r.input![0]!, length], output: [`${own}/start`] },
      { name: `${own}/limit`, opType: "Add", input: [r.input![1]!, length], output: [`${own}/limit`] },
    ];
    before.set(r, [...(before.get(r) ?? []), ...added]);
    r.input = [`${own}/start`, `${own}/limit`, r.input![2]!];
  }
}

/**
 * Every `Trilu` of a tensor computed from the attention mask (Gemma 2's and Gemma 3's sliding window, a `tril` of
 * the 4-D mask `[B, 1, T, S]`) counts its diagonal the past's length further: its rows are the new tokens, whose
 * positions start where the past ends, and its columns the mask's, which count the past, so key `j` lies
 * `past + i − j` positions behind query row `i`. Without a cache the two counts agree. A `Trilu` of the new
 * tokens alone (a square over `input_ids`' length) shifts its rows and columns alike and is left as it is.
 */
function shiftTriluDiagonals(graph: GraphProto, pastLength: () => string, before: Map<NodeProto, NodeProto[]>): void {
  const { producer } = graphIndex(graph);
  const trilus = (graph.node ?? []).filter(
    (n) => n.opType === "Trilu" && !n.domain && ancestry(producer, [n.input![0]!]).inputs.has("attention_mask"),
  );
  for (const [j, t] of trilus.entries()) {
    const k = `/hsm/cache/trilu_${j}/k`;
    const [x, diagonal] = t.input!;
    before.set(t, [
      ...(before.get(t) ?? []),
      diagonal
        ? { name: k, opType: "Add", input: [diagonal, pastLength()], output: [k] }
        : { name: k, opType: "Identity", input: [pastLength()], output: [k] },
    ]);
    t.input = [x!, k];
  }
}

/**
 * The past's length, a scalar of the cache's first past input: `pastLength()` names it, and adds the nodes that
 * compute it (before the graph's first node, as they read only that input) on its first call.
 */
function pastLengthOf(graph: GraphProto, cache: JoinedCache, before: Map<NodeProto, NodeProto[]>): () => string {
  const name = "/hsm/cache/past_length";
  let placed = false;
  return () => {
    if (placed) return name;
    placed = true;
    const axis = `${name}/axis`;
    const shape = `${name}/shape`;
    (graph.initializer ??= []).push(int64Tensor(axis, [cache.seqAxis], []));
    const first = graph.node![0]!;
    before.set(first, [
      { name: shape, opType: "Shape", input: [cache.past], output: [shape] },
      { name, opType: "Gather", input: [shape, axis], output: [name], attribute: [{ name: "axis", type: INT, i: 0 }] },
      ...(before.get(first) ?? []),
    ]);
    return name;
  };
}

/**
 * Every `Gather` whose indices are positions counted over the attention mask (a `CumSum` of `attention_mask`, as
 * OPT counts them, not `position_ids` or the cache) reads only their last `T` columns, `T` the new tokens' count:
 * the mask spans the past and the new tokens, and a with-past export slices its count at the past's length
 * (`positions[:, past:]`) where a graph written without a cache slices it at 0. Positions already cut to the new
 * tokens are left as they are, and without a past the slice keeps every column.
 */
function sliceMaskPositions(graph: GraphProto, before: Map<NodeProto, NodeProto[]>): void {
  const { producer } = graphIndex(graph);
  const gathers = (graph.node ?? []).filter((n) => {
    if (n.opType !== "Gather" || n.domain || !n.input?.[1]) return false;
    const { inputs, ops } = ancestry(producer, [n.input[1]]);
    return (
      ops.has("CumSum") &&
      inputs.has("attention_mask") &&
      ![...inputs].some((t) => t === "position_ids" || isPastInput(t))
    );
  });
  if (gathers.length === 0) return;
  const name = "/hsm/cache/new_positions";
  (graph.initializer ??= []).push(
    int64Tensor(`${name}/one`, [1]),
    int64Tensor(`${name}/end`, [Number.MAX_SAFE_INTEGER]),
  );
  const first: NodeProto[] = [
    { name: `${name}/ids_shape`, opType: "Shape", input: ["input_ids"], output: [`${name}/ids_shape`] },
    {
      name: `${name}/length`,
      opType: "Slice",
      input: [`${name}/ids_shape`, `${name}/one`, `${name}/end`],
      output: [`${name}/length`],
    },
    { name: `${name}/start`, opType: "Neg", input: [`${name}/length`], output: [`${name}/start`] },
  ];
  for (const [j, n] of gathers.entries()) {
    const cut = `${name}/indices_${j}`;
    const slice: NodeProto = {
      name: cut,
      opType: "Slice",
      input: [n.input![1]!, `${name}/start`, `${name}/end`, `${name}/one`],
      output: [cut],
    };
    before.set(n, [...(before.get(n) ?? []), ...(j === 0 ? first : []), slice]);
    n.input![1] = cut;
  }
}

/**
 * Makes `reshape` (which merges batch and heads after the cache has joined its input) take the sequence's length
 * from its input: its target's entry on `axis` (the sequence's, counted from the end) becomes `-1`. An export
 * writes that entry as the new tokens' count, which with a cache is no longer the keys' length. Returns the nodes
 * that compute the new target, to run before the Reshape.
 */
function sequenceLeftFree(graph: GraphProto, reshape: NodeProto, axis: -1 | -2, name: string): NodeProto[] {
  const target = reshape.input![1]!;
  const at = (suffix: string) => `${name}/target/${suffix}`;
  (graph.initializer ??= []).push(
    int64Tensor(at("zero"), [0]),
    int64Tensor(at("axis"), [axis]),
    int64Tensor(at("free"), [-1]),
    int64Tensor(at("after"), [axis + 1]),
    int64Tensor(at("end"), [Number.MAX_SAFE_INTEGER]),
  );
  const nodes: NodeProto[] = [
    { name: at("head"), opType: "Slice", input: [target, at("zero"), at("axis")], output: [at("head")] },
  ];
  const parts = [at("head"), at("free")];
  if (axis === -2) {
    nodes.push({ name: at("tail"), opType: "Slice", input: [target, at("after"), at("end")], output: [at("tail")] });
    parts.push(at("tail"));
  }
  nodes.push({
    name: at("free_sequence"),
    opType: "Concat",
    input: parts,
    output: [at("free_sequence")],
    attribute: [{ name: "axis", type: INT, i: 0 }],
  });
  reshape.input![1] = at("free_sequence");
  return nodes;
}

/**
 * Adds a KV cache to a graph without one, in place: per attention, inputs
 * `past_key_values.N.key` and `.value` concatenated with the keys and values
 * along the sequence and output as `present.N.*` — `[batch, kvHeads, past,
 * headDim]` before repeated heads where the graph shows them (see
 * {@link earliestPoint}), else as the products read them (keys
 * `[batch, heads, headDim, past]`; GPT-BigCode's multi-query keys and values,
 * without a heads' axis, `[batch, past, headDim]`). Present outputs the graph already has (of the
 * prompt alone) are dropped. False, and the graph untouched, where the graph
 * has past inputs, no attention mask, fused attention operators, or not one
 * Softmax attention per decoder block (a router's Softmax, read by `TopK`, is none),
 * or where its default-domain `opset` is below {@link MIN_OPSET}.
 */
export function addKvCache(graph: GraphProto, opset: number, numLayers: number, shape: AttentionShape): boolean {
  const inputs = graph.input ?? [];
  if (opset < MIN_OPSET) return false;
  if (inputs.some((v) => isPastInput(v.name!)) || !inputs.some((v) => v.name === "attention_mask")) return false;
  const sites = findSites(graph, opset);
  if (!sites || sites.length !== numLayers) return false;
  const floatType = (graph.output ?? []).find((o) => o.name === "logits")?.type?.tensorType?.elemType ?? DataType.FLOAT;
  const { producer, consumers } = graphIndex(graph);
  // Each concatenation goes right before the node that reads it, keeping the nodes in topological order.
  const before = new Map<NodeProto, NodeProto[]>();
  const added = [];
  const outputs = [];
  const points: JoinedCache[] = [];
  for (const [i, { scores, context }] of sites.entries()) {
    const key = earliestPoint({ reader: scores, index: 1, axis: -1, kv: false, rank: 4 }, producer, consumers);
    // The values have the keys' rank: without a heads' axis where the keys have none.
    const value = earliestPoint(
      { reader: context, index: 1, axis: -2, kv: false, rank: key.rank },
      producer,
      consumers,
    );
    for (const [kind, { reader, index, axis, kv, rank, merged }] of [
      ["key", key],
      ["value", value],
    ] as const) {
      const past = pastInputName(i, kind);
      const present = presentOutputName(i, kind);
      const heads = kv || !repeated(reader.input![index]!, shape, producer) ? shape.kvHeads : shape.heads;
      const dims = (length: string) =>
        rank === 3
          ? ["batch_size", length, shape.headDim]
          : axis === -1
            ? ["batch_size", heads, shape.headDim, length]
            : ["batch_size", heads, length, shape.headDim];
      added.push(valueInfo(past, floatType, dims("past_sequence_length")));
      outputs.push(valueInfo(present, floatType, dims("total_sequence_length")));
      const concat = {
        name: `/hsm/cache.${i}/${kind}`,
        opType: "Concat",
        input: [past, reader.input![index]!],
        output: [present],
        attribute: [{ name: "axis", type: INT, i: axis }],
      };
      before.set(reader, [
        ...(before.get(reader) ?? []),
        concat,
        ...(merged ? sequenceLeftFree(graph, reader, axis, `/hsm/cache.${i}/${kind}`) : []),
      ]);
      points.push({
        tensor: reader.input![index]!,
        past,
        seqAxis: rank + axis,
        rank,
        name: `/hsm/cache.${i}/${kind}`,
      });
      reader.input![index] = present;
    }
  }
  growKeyLengths(graph, points, before);
  const pastLength = pastLengthOf(graph, points[0]!, before);
  shiftQueryRanges(graph, opset, pastLength, before);
  shiftTriluDiagonals(graph, pastLength, before);
  sliceMaskPositions(graph, before);
  graph.node = (graph.node ?? []).flatMap((n) => [...(before.get(n) ?? []), n]);
  graph.input = [...inputs, ...added];
  graph.output = [...(graph.output ?? []).filter((o) => !isPresentOutput(o.name!)), ...outputs];
  return true;
}
