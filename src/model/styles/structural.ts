/**
 * Structural detection: the decoder blocks found from the graph's shape, not
 * its names. Every path from the token embedding to the logits passes through
 * each residual `Add` (the skip connection bypasses everything else of a
 * block), so the residual stream is the chain of *dominators* between the
 * embedding `Gather` and the LM head: the tensors no path can avoid.
 *
 * - A pre-norm block adds to the stream twice (attention, then MLP); a
 *   parallel block (GPT-J, NeoX, Phi-2, Cohere: `x + attn(ln(x)) + mlp(ln(x))`)
 *   once, whether its branches are summed first (`(mlp + attn) + x`) or added
 *   one after the other (`(x + attn) + mlp`, whose inner Add is off the
 *   stream). Each segment between two residual `Add`s is classified by what
 *   it holds (attention: a `Softmax` whose probabilities meet the values in a
 *   matrix product, or an `*Attention` op; an MLP: matrix products and no
 *   attention, a mixture of experts' router Softmax included; parallel:
 *   attention, and two branches added).
 * - The block count must equal config.json's `num_hidden_layers` (genai_config.json's in an
 *   onnxruntime-genai build).
 * - A residual `Add` may be fused with the norm after it: com.microsoft
 *   `SkipSimplifiedLayerNormalization` / `SkipLayerNormalization`
 *   (onnxruntime-genai builds) read the stream and a sublayer's output as
 *   inputs 0 and 1; output 3 (`input_skip_bias_sum`) is their sum, the stream
 *   after that add, and output 0 the normalized value the next sublayer reads.
 *   `GroupQueryAttention` counts as attention (any `*Attention` op does).
 * - The final norm lies between the last residual and the LM head (the first
 *   matrix product after it); its output is the last normalizing operator
 *   (`Mul`, `Add`, `*Normalization`) on that chain, or, where the last
 *   residual is a fused Skip norm (which then usually emits output 0 alone),
 *   that norm's output 0.
 * - A graph with no LM head (a base model's `last_hidden_state`, genai's
 *   `exclude_lm_head` builds' `hidden_states`) ends in the normed stream: where
 *   no matrix product lies between the last residual and the graph's output,
 *   that output, behind any casts or reshapes, is the final norm's.
 * - A bias `Add` (the stream and a tensor no path from the embedding reaches)
 *   right after a residual `Add` belongs to it (`x + h @ W + b`): the block's
 *   output is the biased sum.
 * - Besides the residual `Add`s and Skip norms only a `Cast`/`Identity`/
 *   `Dropout` or a reshape may sit on the stream (OPT flattens it to
 *   `[B·T, d]` around each MLP), and before the first block an elementwise
 *   scale or sum (Gemma's √d `Mul`, GPT-2's position embeddings) or a norm
 *   (BLOOM's embedding LayerNorm). The embedding `Gather` may read
 *   `input_ids` through casts and reshapes (GPT-2's `view(-1, T)`);
 *   any other operator there is a fused op this unit does not know, and
 *   detection stops naming it (at once for an op of another domain, whose
 *   outputs it cannot tell apart).
 *
 * Node names are a cross-check: where onnxruntime-genai or torch/optimum
 * names are present, the tensors found by name are compared with the
 * structure's, and a disagreement is reported (structure wins).
 */
import { graphIndex, type GraphProto, type NodeProto } from "../../onnx/graph.js";
import { genaiStyle } from "./genai.js";
import { DetectionError, isSkipNorm, type GraphStyle, type HiddenTensor, type Located } from "./style.js";
import { torchNamesStyle } from "./torch-names.js";

const SHAPE_ONLY = new Set(["Shape", "Size"]);
/**
 * What may sit on the stream between residuals without changing a value: casts, and reshapes between
 * `[B, T, d]` and `[B·T, d]` (OPT runs each block's MLP half on the flattened stream).
 */
const PASS_THROUGH = new Set(["Cast", "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze"]);
/**
 * Before the first block: the embedding scaled (Gemma's √d), summed with position embeddings (GPT-2, OPT), or
 * normed (BLOOM's word_embeddings_layernorm, as one op or written out).
 */
const EMBEDDING_OPS = new Set([
  "Mul",
  "Div",
  "Add",
  "Sub",
  "Pow",
  "Sqrt",
  "Reciprocal",
  "ReduceMean",
  "LayerNormalization",
  "SimplifiedLayerNormalization",
  "RMSNormalization",
]);
/** Operators that only rearrange `input_ids` before the embedding reads them (GPT-2's `view(-1, T)`). */
const IDS_REARRANGE = new Set(["Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"]);
const NORM_OUTPUT = new Set(["Mul", "Add", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization"]);
/** How a residual is called in messages: an `Add`, or the sum inside a fused Skip norm. */
const residualWord = (n: NodeProto) => (isSkipNorm(n) ? "residual sum" : "residual Add");
/** What may lie between an attention's Softmax and its product with the values: casts, reshapes, a mask. */
const PROBS_TO_VALUES = new Set([
  "Cast",
  "CastLike",
  "Identity",
  "Dropout",
  "Reshape",
  "Transpose",
  "Where",
  "Squeeze",
  "Unsqueeze",
  "Flatten",
  "Expand",
]);
/**
 * Whether `n` attends: an `*Attention` op, or a Softmax whose probabilities reach a matrix product within the
 * segment (softmax(q·kᵀ)·v). A mixture of experts' router Softmax (Mixtral's) picks experts through `TopK`
 * and weights their outputs; it is part of an MLP, not attention.
 */
function isAttention(n: NodeProto, segment: ReadonlySet<NodeProto>, consumers: Map<string, NodeProto[]>): boolean {
  if (/Attention$/.test(n.opType ?? "")) return true;
  if (n.opType !== "Softmax") return false;
  const reaches = (t: string, depth: number): boolean =>
    (consumers.get(t) ?? []).some(
      (c) =>
        segment.has(c) &&
        (isProduct(c) ||
          (depth < 4 && PROBS_TO_VALUES.has(c.opType ?? "") && (c.output ?? []).some((o) => reaches(o, depth + 1)))),
    );
  return (n.output ?? []).some((o) => reaches(o, 0));
}
const isProduct = (n: NodeProto) => /MatMul|Gemm/.test(n.opType ?? "");
const opName = (n: NodeProto) => `${n.domain ? `${n.domain}.` : ""}${n.opType}${n.name ? ` (${n.name})` : ""}`;

type SegmentKind = "attention" | "mlp" | "parallel" | "other";

/** The residual stream of a decoder graph, as its structure shows it. */
interface ResidualStream {
  /** The embedding's output (after any scale). */
  embedding: string;
  /** The residual Adds (or fused Skip norms), in order, with what each adds to the stream and the tensor of the sum (absent where a Skip norm does not emit it). */
  residuals: { node: NodeProto; kind: SegmentKind; sum?: string; biases?: NodeProto[] }[];
  /** Per decoder block, the index in `residuals` of the Add that ends it. */
  blockEnds: number[];
  /** The final norm's output and the node producing it; `output`, the graph output it gives, where no LM head follows. */
  finalNorm: { tensor: string; node: NodeProto; output?: string };
}

/** The styles whose names cross-check the structure, the more specific first (genai graphs also have `/model/layers.N/` names). */
const NAMERS: readonly GraphStyle[] = [genaiStyle, torchNamesStyle];

/** The naming habit a graph shows, for messages and the manifest: genai, torch-names, dynamo-names or anonymous. */
function namingSeen(graph: GraphProto): string {
  const namer = NAMERS.find((s) => s.recognize(graph, { numLayers: 0 }));
  if (namer) return namer.name;
  const nodes = graph.node ?? [];
  if (nodes.length > 0 && nodes.filter((n) => /^node_/.test(n.name ?? "")).length > nodes.length / 2)
    return "dynamo-names";
  return "anonymous";
}

class StructureError extends Error {
  constructor(
    message: string,
    readonly candidates: string[],
  ) {
    super(message);
  }
}

/** The embedding Gather: a gather of a weight matrix by `input_ids` (possibly through a Cast). */
function findEmbedding(graph: GraphProto, consumers: Map<string, NodeProto[]>): NodeProto | undefined {
  const ids = (graph.input ?? []).find((v) => v.name === "input_ids")?.name;
  if (!ids) return undefined;
  // The ids as the embedding reads them: input_ids itself, or what only casts or reshapes it.
  const views = new Set([ids]);
  const readers: NodeProto[] = [];
  for (const view of views)
    for (const c of consumers.get(view) ?? []) {
      readers.push(c);
      if (IDS_REARRANGE.has(c.opType ?? "") && !c.domain && c.input?.[0] === view) views.add(c.output![0]!);
    }
  const gathers = readers.filter(
    (n) =>
      /^Gather/.test(n.opType ?? "") &&
      n.input?.[1] !== undefined &&
      views.has(n.input[1]) &&
      !views.has(n.input[0] ?? ""),
  );
  const weights = new Set((graph.initializer ?? []).filter((t) => (t.dims?.length ?? 0) === 2).map((t) => t.name!));
  return gathers.find((n) => weights.has(n.input![0]!)) ?? (gathers.length === 1 ? gathers[0] : undefined);
}

/**
 * The output the stream ends in: `logits`, else the first output that is not a KV cache (the logits under another
 * name, or the normed stream itself of a graph with no LM head: optimum's `last_hidden_state`, onnxruntime-genai's
 * `hidden_states`).
 */
function findOutput(graph: GraphProto): string | undefined {
  const outs = (graph.output ?? []).map((o) => o.name!);
  return outs.find((o) => o === "logits") ?? outs.find((o) => !/^present/.test(o));
}

/** The graph as {@link followStream}'s steps read it: its index, node positions, the nodes from embedding to logits. */
interface StreamGraph {
  producer: Map<string, NodeProto>;
  consumers: Map<string, NodeProto[]>;
  pos: Map<NodeProto, number>;
  /** The embedding's output: where the stream starts. */
  source: string;
  /** The output the stream ends in (findOutput). */
  output: string;
  /** The node producing it: the logits', or the final norm's where the graph has no LM head. */
  sink: NodeProto;
  /** Nodes on some path from the embedding to the logits. */
  onPath: Set<NodeProto>;
  /** The nodes of `onPath` in graph order. */
  ordered: NodeProto[];
}

/** The nodes on some path from `source` to `sink`: those below the source, walked back from the sink. */
function pathNodes(
  source: string,
  sink: NodeProto,
  producer: Map<string, NodeProto>,
  consumers: Map<string, NodeProto[]>,
): Set<NodeProto> {
  const below = new Set<NodeProto>();
  const stack = [source];
  while (stack.length) {
    const t = stack.pop()!;
    for (const c of consumers.get(t) ?? []) {
      // A read of a shape or a type is no data flow: masks built from the embedding's shape, or rotary tables cast
      // like it, do not join the stream.
      if (below.has(c) || SHAPE_ONLY.has(c.opType ?? "") || (c.opType === "CastLike" && c.input![0] !== t)) continue;
      below.add(c);
      stack.push(...(c.output ?? []).filter(Boolean));
    }
  }
  const onPath = new Set<NodeProto>();
  const back = [sink];
  while (back.length) {
    const n = back.pop()!;
    if (onPath.has(n) || !below.has(n)) continue;
    onPath.add(n);
    for (const i of n.input ?? []) {
      const p = producer.get(i);
      if (p) back.push(p);
    }
  }
  return onPath;
}

/** The path's dominators in topological order: the nodes no earlier edge jumps over, which the whole stream passes. */
function dominatorsOf(s: StreamGraph): NodeProto[] {
  const { consumers, onPath, pos } = s;
  const reachOf = (outs: string[]) =>
    Math.max(-1, ...outs.flatMap((o) => (consumers.get(o) ?? []).filter((c) => onPath.has(c)).map((c) => pos.get(c)!)));
  let reach = reachOf([s.source]);
  const dominators: NodeProto[] = [];
  for (const n of s.ordered) {
    if (reach <= pos.get(n)!) dominators.push(n);
    reach = Math.max(reach, reachOf((n.output ?? []).filter(Boolean)));
  }
  return dominators;
}

/** The residual Adds along the dominators, the nodes after the last of them, and the LM head where the walk stopped. */
interface ResidualWalk {
  residuals: ResidualStream["residuals"];
  tail: NodeProto[];
  /** Absent where the walk reached the graph's output with no LM head on the way: that output is the stream's end. */
  head: NodeProto | undefined;
}

/**
 * Whether the graph's output may be the residual stream itself, normed: a normalizing operator or a cast produces
 * it. Any other operator there is taken for the LM head, as a matrix product is.
 */
const endsStream = (n: NodeProto) =>
  (!n.domain || n.domain === "com.microsoft") && (NORM_OUTPUT.has(n.opType ?? "") || PASS_THROUGH.has(n.opType ?? ""));

/** How deep in a residual's sum of Adds the stream may sit: `(x + attn) + mlp` is one Add deep. */
const SUM_DEPTH = 3;

/**
 * What `d` adds to the stream, or undefined where it is no residual: an Add of
 * the stream and a branch (a Skip norm's inputs 0 and 1, its weights following
 * them), or an Add of such an Add and a further branch. A parallel block
 * written `x + attn(ln(x)) + mlp(ln(x))` (HuggingFace's Cohere, StableLM with
 * `use_parallel_residual`) adds `(x + attn) + mlp`: the inner Add is no
 * dominator, the MLP's path passing it by, so the stream is one Add deep in
 * the block's last. A bias Add may sit between them (`((x + attn) + b) + mlp`).
 */
function addedTo(
  d: NodeProto,
  stream: string,
  fromStream: (t: string) => boolean,
  producer: Map<string, NodeProto>,
  depth = 0,
): string[] | undefined {
  const skip = isSkipNorm(d);
  if (!skip && (d.opType !== "Add" || d.domain)) return undefined;
  const ins = skip ? (d.input ?? []).slice(0, 2).filter(Boolean) : (d.input ?? []).filter(Boolean);
  if (ins.length !== 2) return undefined;
  if (!ins.every(fromStream)) {
    // A bias added inside the sum (NeoX's `x + attn @ W + b + mlp`): the stream's Add lies behind it.
    const behind = !skip && depth > 0 ? ins.find(fromStream) : undefined;
    const inner = behind && behind !== stream ? producer.get(behind) : undefined;
    return inner?.opType === "Add" && !inner.domain && depth < SUM_DEPTH
      ? addedTo(inner, stream, fromStream, producer, depth + 1)
      : undefined;
  }
  if (ins.includes(stream)) return [ins[0] === stream ? ins[1]! : ins[0]!];
  if (skip || depth >= SUM_DEPTH) return undefined;
  for (const [i, t] of ins.entries()) {
    const inner = producer.get(t);
    const added = inner?.opType === "Add" ? addedTo(inner, stream, fromStream, producer, depth + 1) : undefined;
    if (added) return [...added, ins[1 - i]!];
  }
  return undefined;
}

/**
 * Whether `d` adds to `stream` a tensor no path from the embedding reaches (an initializer, a constant): a
 * branch's bias that the module adds after its residual (`x + h @ W + b`, summed left to right), so the stream
 * after it, not the residual Add's own output, is what the block hands on.
 */
function isBiasAdd(d: NodeProto, stream: string, fromStream: (t: string) => boolean): boolean {
  if (d.opType !== "Add" || d.domain) return false;
  const ins = (d.input ?? []).filter(Boolean);
  return ins.length === 2 && ins.includes(stream) && !fromStream(ins[0] === stream ? ins[1]! : ins[0]!);
}

/**
 * Walks the dominators from the embedding: each Add (or fused Skip norm) of
 * the stream and a branch of it is a residual, classified by what its segment
 * holds; the walk stops at the LM head. Throws where the stream passes an op it cannot read.
 */
function walkResiduals(s: StreamGraph, dominators: NodeProto[], embed: NodeProto): ResidualWalk {
  const { producer, pos, source, onPath, ordered, sink } = s;
  const fromStream = (t: string) => t === source || onPath.has(producer.get(t)!);
  const residuals: ResidualStream["residuals"] = [];
  let stream = source;
  let streamPos = pos.get(embed)!;
  let tail: NodeProto[] = [];
  let head: NodeProto | undefined;
  // A fused Skip norm that emitted no sum: the stream may not go on after it.
  let closed: NodeProto | undefined;
  for (const d of dominators) {
    const skip = isSkipNorm(d);
    const last = residuals.at(-1);
    if (last?.sum === stream && isBiasAdd(d, stream, fromStream)) {
      // `x + branch + b` adds the branch's bias after the residual: the block's output is the biased sum.
      last.sum = d.output![0]!;
      last.biases = [...(last.biases ?? []), d];
      stream = last.sum;
      streamPos = pos.get(d)!;
      continue;
    }
    const added = addedTo(d, stream, fromStream, producer);
    if (added) {
      if (closed) {
        throw new StructureError(
          `${opName(closed)} gives only its normalized output 0, not the residual sum (output 3), yet the stream goes on after it to ${opName(d)}`,
          streamTensors(residuals, source),
        );
      }
      const segment = ordered.filter((n) => pos.get(n)! > streamPos && pos.get(n)! < pos.get(d)!);
      const top = added.length === 1 ? producer.get(added[0]!) : undefined;
      const inSegment = new Set(segment);
      const attention = segment.some((n) => isAttention(n, inSegment, s.consumers));
      // Two branches added: one after the other to the stream, or summed first (GPT-J's `attn + mlp + x`).
      const sums =
        added.length > 1 ||
        (top?.opType === "Add" && (top.input ?? []).every((i) => i && i !== stream && fromStream(i)));
      const kind: SegmentKind = attention
        ? sums
          ? "parallel"
          : "attention"
        : segment.some(isProduct)
          ? "mlp"
          : "other";
      if (tail.length > 0) {
        const odd = tail.find(
          (t) =>
            t.domain ||
            (!PASS_THROUGH.has(t.opType ?? "") && !(residuals.length === 0 && EMBEDDING_OPS.has(t.opType ?? ""))),
        );
        if (odd) {
          throw new StructureError(
            `an operator it does not know, ${opName(odd)}, sits on the residual stream after ${residualWord(residuals.at(-1)?.node ?? d)} ${residuals.length}`,
            streamTensors(residuals, source),
          );
        }
      }
      const sum = skip ? d.output?.[3] || undefined : d.output![0]!;
      residuals.push({ node: d, kind, ...(sum ? { sum } : {}) });
      if (!sum) closed = d;
      stream = sum ?? d.output![0]!;
      streamPos = pos.get(d)!;
      tail = [];
    } else if ((isProduct(d) && residuals.length > 0) || (d === sink && !endsStream(d))) {
      head = d;
      break;
    } else {
      // A fused op of some domain that is no norm: where the stream goes on after it cannot be told.
      if (residuals.length > 0 && d.domain && !NORM_OUTPUT.has(d.opType ?? "")) {
        throw new StructureError(
          `an operator it does not know, ${opName(d)}, sits on the residual stream after ${residualWord(residuals.at(-1)!.node)} ${residuals.length}`,
          streamTensors(residuals, source),
        );
      }
      // The stream flows through every dominator; what may sit there is checked at the next residual Add.
      tail.push(d);
      stream = d.output![0]!;
    }
  }
  return { residuals, tail, head };
}

/**
 * The final norm: a norm after the last residual, else the last residual's own
 * (a fused Skip norm), with nothing but casts after it. Where no LM head
 * follows, the graph's output is the normed stream itself: the final norm is
 * what produces that output, behind casts and reshapes at most.
 */
function finalNormOf(s: StreamGraph, walk: ResidualWalk, candidates: string[]): NodeProto {
  const { residuals, tail, head } = walk;
  const last = residuals.at(-1)!.node;
  if (!head) {
    // The output's producer, behind any casts and reshapes: the final norm's last operator (a Skip norm's output 0).
    let norm = s.sink;
    let out = s.output;
    while (PASS_THROUGH.has(norm.opType ?? "") && s.producer.has(norm.input?.[0] ?? "")) {
      out = norm.input![0]!;
      norm = s.producer.get(out)!;
    }
    const normed = isSkipNorm(norm) ? norm === last : NORM_OUTPUT.has(norm.opType ?? "") && tail.includes(norm);
    if (!normed || norm.output?.[0] !== out)
      throw new StructureError(
        `no LM head follows the last ${residualWord(last)} (${last.name || last.output![0]}), and the graph's output ${s.output} is not a final norm's`,
        candidates,
      );
    return norm;
  }
  const norm =
    [...tail].reverse().find((t) => NORM_OUTPUT.has(t.opType ?? "")) ??
    (isSkipNorm(last) && tail.every((t) => !t.domain && PASS_THROUGH.has(t.opType ?? "")) ? last : undefined);
  if (!norm)
    throw new StructureError(
      `no final norm between the last ${residualWord(last)} (${last.name}) and the LM head`,
      candidates,
    );
  return norm;
}

/** Groups the residuals into blocks (attention then MLP, or one parallel segment); returns each block's last residual. */
function groupBlocks(residuals: ResidualStream["residuals"], candidates: string[]): number[] {
  const blockEnds: number[] = [];
  for (let i = 0; i < residuals.length;) {
    const kind = residuals[i]!.kind;
    if (kind === "parallel") {
      blockEnds.push(i);
      i += 1;
    } else if (kind === "attention" && residuals[i + 1]?.kind === "mlp") {
      blockEnds.push(i + 1);
      i += 2;
    } else {
      const what =
        kind === "attention"
          ? "attention with no MLP after it"
          : kind === "mlp"
            ? "an MLP with no attention before it"
            : "neither attention nor an MLP";
      throw new StructureError(
        `block ${blockEnds.length} is incomplete: ${residualWord(residuals[i]!.node)} ${i + 1} of ${residuals.length} (${residuals[i]!.node.name || residuals[i]!.node.output![0]}) adds ${what}; a block may be missing`,
        candidates,
      );
    }
  }
  return blockEnds;
}

/**
 * Follows the residual stream of `graph` and groups it into blocks; throws a
 * {@link StructureError} (message and candidate tensors) when the structure is
 * not a decoder this unit can read.
 */
function followStream(graph: GraphProto): ResidualStream {
  const nodes = graph.node ?? [];
  const { producer, consumers } = graphIndex(graph);
  const embed = findEmbedding(graph, consumers);
  if (!embed) throw new StructureError("no embedding Gather reads input_ids", []);
  const output = findOutput(graph);
  const sink = output ? producer.get(output) : undefined;
  if (!output || !sink)
    throw new StructureError(
      output ? `no node produces the graph's output ${output}` : "the graph has no output but its KV cache",
      [],
    );
  const pos = new Map(nodes.map((n, i) => [n, i]));
  const source = embed.output![0]!;
  const onPath = pathNodes(source, sink, producer, consumers);
  const ordered = nodes.filter((n) => onPath.has(n));
  const s: StreamGraph = { producer, consumers, pos, source, output, sink, onPath, ordered };

  const walk = walkResiduals(s, dominatorsOf(s), embed);
  const { residuals, tail, head } = walk;
  const candidates = streamTensors(residuals, source);
  if (residuals.length === 0) {
    const fused = tail.find(
      (t) => t.domain || (!PASS_THROUGH.has(t.opType ?? "") && !EMBEDDING_OPS.has(t.opType ?? "")),
    );
    throw new StructureError(
      fused
        ? `no residual Add follows the embedding; the stream runs through ${opName(fused)}, a fused op it does not know`
        : "no residual Add follows the embedding",
      tail.flatMap((t) => t.output ?? []).filter(Boolean),
    );
  }
  const norm = finalNormOf(s, walk, candidates);
  const blockEnds = groupBlocks(residuals, candidates);
  return {
    embedding: source,
    residuals,
    blockEnds,
    finalNorm: { tensor: norm.output![0]!, node: norm, ...(head ? {} : { output }) },
  };
}

function streamTensors(residuals: ResidualStream["residuals"], source: string): string[] {
  return [source, ...residuals.flatMap((r) => (r.sum ? [r.sum] : []))];
}

/** The one-line failure: what the structure showed, the naming style seen, the flag and candidates. */
function failure(graph: GraphProto, problem: string, candidates: string[]): DetectionError {
  const shown = candidates.slice(-12);
  return new DetectionError(
    `structure: ${problem} (graph style seen: ${namingSeen(graph)}). ` +
      `Name the tensors with --hidden-tensors LAYER=TENSOR,…,final=TENSOR; candidate tensors: ${shown.length ? shown.join(", ") : "(none on a residual stream)"}`,
  );
}

/**
 * Locates the blocks by structure alone, no names consulted. `layersFrom` says where `numLayers` was read, for the
 * message when the stream holds another count.
 */
export function locateByStructure(
  graph: GraphProto,
  numLayers: number,
  layersFrom = "config.json's num_hidden_layers",
): Located {
  let s: ResidualStream;
  try {
    s = followStream(graph);
  } catch (err) {
    if (err instanceof StructureError) throw failure(graph, err.message, err.candidates);
    throw err;
  }
  const candidates = streamTensors(s.residuals, s.embedding);
  const word = residualWord(s.residuals[0]!.node);
  if (s.blockEnds.length !== numLayers) {
    const perBlock =
      s.residuals[s.blockEnds[0]!]!.kind === "parallel" ? "one per parallel block" : "two per pre-norm block";
    throw failure(
      graph,
      `the residual stream holds ${s.blockEnds.length} blocks (${s.residuals.length} ${word}s, ${perBlock}) but ${layersFrom} is ${numLayers}`,
      candidates,
    );
  }
  const tensors: HiddenTensor[] = s.blockEnds.slice(0, -1).map((end, l) => {
    const { node, sum, biases } = s.residuals[end]!;
    const bias = biases?.at(-1);
    const what = isSkipNorm(node)
      ? `residual sum ${end + 1} of ${s.residuals.length} (output 3, input_skip_bias_sum, of ${node.opType})`
      : `residual Add ${end + 1} of ${s.residuals.length}`;
    const after = bias ? `, with the bias added after it${bias.name ? ` (${bias.name})` : ""}` : "";
    return {
      layer: l,
      tensor: sum!,
      how: `structure: ${what}, the end of block ${l}${node.name ? ` (${node.name})` : ""}${after}`,
    };
  });
  const norm = s.finalNorm;
  const fused = isSkipNorm(norm.node) && norm.node === s.residuals.at(-1)!.node;
  const named = norm.node.name ? ` (${norm.node.name})` : "";
  const where = norm.output
    ? `${fused ? "" : " after the last residual"}${named}, which the graph outputs as ${norm.output}: it has no LM head`
    : fused
      ? ` before the LM head${named}`
      : ` between the last residual and the LM head${named}`;
  tensors.push({
    layer: numLayers - 1,
    tensor: norm.tensor,
    how: fused
      ? `structure: output 0 of the last residual sum's ${norm.node.opType}, the final norm${where}`
      : `structure: final norm output${where}`,
  });
  return { tensors, lastLayerFinalNorm: true };
}

/**
 * The names cross-check: where onnxruntime-genai or torch/optimum names are
 * present, what they say beside what the structure found. Undefined when the
 * graph has no such names.
 */
function crossCheckNames(
  graph: GraphProto,
  numLayers: number,
  found: HiddenTensor[],
): { agree: boolean; note: string } | undefined {
  const namer = NAMERS.find((s) => s.recognize(graph, { numLayers }));
  if (!namer) return undefined;
  let byName: HiddenTensor[];
  try {
    byName = namer.locate(graph, numLayers, { numLayers }).tensors;
  } catch (err) {
    return {
      agree: false,
      note: `structure and names disagree: names find no answer (${(err as Error).message.split(". ")[0]}); the structure's tensors are used`,
    };
  }
  const differ = found.filter((t) => byName.find((b) => b.layer === t.layer)?.tensor !== t.tensor);
  if (differ.length === 0) return { agree: true, note: `names (${namer.name}) agree on all ${numLayers} blocks` };
  const shown = differ
    .slice(0, 3)
    .map(
      (t) =>
        `layer ${t.layer}: structure ${t.tensor}, names ${byName.find((b) => b.layer === t.layer)?.tensor ?? "none"}`,
    );
  return {
    agree: false,
    note: `structure and names disagree on ${differ.length} layer(s) (${shown.join("; ")}${differ.length > 3 ? "; …" : ""}); the structure's tensors are used`,
  };
}

export const structuralStyle: GraphStyle = {
  name: "structural",
  notFound: "no embedding Gather reads input_ids on the way to the logits",
  recognize(graph) {
    const { producer, consumers } = graphIndex(graph);
    const output = findOutput(graph);
    return findEmbedding(graph, consumers) !== undefined && output !== undefined && producer.has(output);
  },
  locate(graph, numLayers, context) {
    const located = locateByStructure(graph, numLayers, context.layersFrom);
    const check = crossCheckNames(graph, numLayers, located.tensors);
    return {
      ...located,
      crossCheck: check?.note ?? `names: none to check against (graph style seen: ${namingSeen(graph)})`,
      warnings: check && !check.agree ? [check.note] : [],
    };
  },
};
