/**
 * com.microsoft `GroupQueryAttention` written out in standard ONNX operators,
 * computing what onnxruntime's CPU kernel computes, for devices whose own
 * kernel computes something else (onnxruntime-node's WebGPU kernel: states a
 * few percent away, and right-padded rows that depend on their batch).
 *
 * The CPU kernel, for row b with `seqlens_k[b] + 1 = n_b` valid tokens and S
 * new ones: kept_b = max(0, n_b − S) tokens of the past are kept (0 on the first
 * prompt, where the cache is empty), and new token i sits at position
 * kept_b + i — its rotary position and its slot in the present cache, which
 * holds the kept past, the S new tokens, and zeros after them. Query i
 * attends to keys j ≤ kept_b + i, j < n_b (and j > kept_b + i − window with a
 * local window: the window's last keys), on scores scaled, then soft-capped, then softmaxed. Queries
 * of a right-padded prompt's padding see what they see here, which no real
 * token reads (masked with the lowest float, not −∞, so that a padding query a
 * local window leaves without keys averages them instead of giving NaN, which
 * a zero weight would carry into real tokens). Everything is computed in float32, as the CPU kernel does
 * (its float16 variant widens too), and cast back to the graph's type.
 * `total_sequence_length` only sizes the kernel's present buffer, which is
 * past + S whenever hsm feeds the graph.
 */
import {
  DataType,
  defaultOpset,
  GraphBuilder,
  num,
  type GraphProto,
  type ModelProto,
  type NodeProto,
} from "./graph.js";

const FLOAT32_LOWEST = -3.4028234663852886e38;

/** The GroupQueryAttention inputs written out here: query, key, value, past key and value, lengths, rotary caches. */
const COVERED_INPUTS = 9;

/** An attribute of `node` as a number, or `fallback` where it is absent. */
function attr(node: NodeProto, name: string, fallback: number): number {
  const a = (node.attribute ?? []).find((x) => x.name === name);
  if (!a) return fallback;
  return a.type === 1 ? (a.f ?? 0) : num(a.i);
}

/** The operators written out (CastLike, Split's sizes as an input) need opset 15 of the default domain. */
const MIN_OPSET = 15;

/**
 * Why a GroupQueryAttention node of `model` cannot be written out by {@link decomposeGroupQueryAttention}
 * (undefined: every one can): an input, output or attribute whose meaning is not written out here, or an old opset.
 */
export function groupQueryAttentionGap(model: Pick<ModelProto, "graph" | "opsetImport">): string | undefined {
  const nodes = (model.graph?.node ?? []).filter((n) => n.opType === "GroupQueryAttention");
  if (nodes.length === 0) return undefined;
  const opset = defaultOpset(model);
  if (opset < MIN_OPSET)
    return `GroupQueryAttention in a graph of opset ${opset} (hsm writes it out from opset ${MIN_OPSET})`;
  for (const n of nodes) {
    const extra = (n.input ?? []).slice(COVERED_INPUTS).findIndex(Boolean);
    if (extra >= 0)
      return `GroupQueryAttention ${n.name} has input ${COVERED_INPUTS + extra}, which hsm cannot write out`;
    if ((n.output ?? []).slice(3).some(Boolean))
      return `GroupQueryAttention ${n.name} has an output hsm cannot write out`;
    if (attr(n, "smooth_softmax", 0) !== 0) return `GroupQueryAttention ${n.name} uses smooth_softmax`;
    if (!n.input?.[3] !== !n.input?.[4]) return `GroupQueryAttention ${n.name} has a past key without a past value`;
  }
  return undefined;
}

/**
 * Replaces every GroupQueryAttention node of `graph` by standard operators computing what the CPU kernel
 * computes (see the file's comment), in place; returns how many were replaced. Check
 * {@link groupQueryAttentionGap} first.
 */
export function decomposeGroupQueryAttention(graph: GraphProto): number {
  const taken = new Set((graph.node ?? []).map((n) => n.name!).filter(Boolean));
  const out: NodeProto[] = [];
  const initializers = [];
  let replaced = 0;
  for (const node of graph.node ?? []) {
    if (node.opType !== "GroupQueryAttention") {
      out.push(node);
      continue;
    }
    const g = new GraphBuilder(taken);
    writeOut(g, node, replaced);
    out.push(...g.nodes);
    initializers.push(...g.initializers);
    replaced++;
  }
  graph.node = out;
  graph.initializer = [...(graph.initializer ?? []), ...initializers];
  return replaced;
}

/** Node builders scoped to one GroupQueryAttention node; constants are named per node so that none is shared. */
class Writer {
  readonly scope: string;
  private readonly constants: string;

  constructor(
    readonly g: GraphBuilder,
    node: NodeProto,
    k: number,
  ) {
    this.scope = `${node.name}/hsm`;
    this.constants = `/hsm/gqa.${k}`;
  }

  ints(name: string, values: number[], dims?: number[]): string {
    return this.g.ints(`${this.constants}/${name}`, values, dims);
  }

  float(name: string, v: number): string {
    return this.g.floats(`${this.constants}/${name}`, Float32Array.of(v), []);
  }

  op(type: string, inputs: string[], attrs: Parameters<GraphBuilder["op1"]>[3] = {}): string {
    return this.g.op1(this.scope, type, inputs, attrs);
  }

  ops(type: string, inputs: string[], attrs: Parameters<GraphBuilder["op1"]>[3], n: number): string[] {
    return this.g.op(this.scope, type, inputs, attrs, n);
  }

  toFloat(x: string): string {
    return this.op("Cast", [x], { to: DataType.FLOAT });
  }

  /** [B, S, N, hd] → [B, N, S, hd] in float32. */
  bnsh(x: string): string {
    return this.toFloat(this.op("Transpose", [x], { perm: [0, 2, 1, 3] }));
  }

  /** `x[..., from:to]` on axis `axis`. */
  slice(x: string, from: string, to: string, axis: number): string {
    return this.op("Slice", [x, from, to, this.ints(`axes_${axis}`, [axis])]);
  }
}

/** The query and the new keys and values, [B, N, S, hd] in float32, from separate inputs or one packed input. */
function headsOf(w: Writer, node: NodeProto, H: number, KV: number): [q: string, k: string, v: string] {
  const [query, key, value] = node.input ?? [];
  if (!key) {
    const heads = w.op("Reshape", [query!, w.ints("packed_shape", [0, 0, H + 2 * KV, -1])]);
    const parts = w.ops("Split", [heads, w.ints("packed_split", [H, KV, KV])], { axis: 2 }, 3);
    return parts.map((p) => w.bnsh(p)) as [string, string, string];
  }
  return [
    w.bnsh(w.op("Reshape", [query!, w.ints("q_shape", [0, 0, H, -1])])),
    w.bnsh(w.op("Reshape", [key, w.ints("kv_shape", [0, 0, KV, -1])])),
    w.bnsh(w.op("Reshape", [value!, w.ints("kv_shape", [0, 0, KV, -1])])),
  ];
}

/** A rotation of [B, N, S, hd] tensors by the cached angles of each row's `positions` ([B, S]). */
function rotation(w: Writer, node: NodeProto, positions: string): (x: string) => string {
  const [, , , , , , , cosCache, sinCache] = node.input ?? [];
  const interleaved = attr(node, "rotary_interleaved", 0) !== 0;
  const angles = (cache: string) =>
    w.op("Unsqueeze", [w.op("Gather", [w.toFloat(cache), positions], { axis: 0 }), w.ints("axes_1", [1])]);
  const cos = angles(cosCache!);
  const sin = angles(sinCache!);
  const half = w.op("Gather", [w.op("Shape", [cosCache!]), w.ints("one_1", [1])], { axis: 0 }); // [1]
  const width = w.op("Mul", [half, w.ints("two_1", [2])]);
  return (x) => {
    const rot = w.slice(x, w.ints("zero_1", [0]), width, 3);
    const rest = w.slice(x, width, w.ints("end", [Number.MAX_SAFE_INTEGER]), 3);
    let turned: string;
    if (interleaved) {
      // Pairs (2i, 2i+1) turn by the angle of i.
      const pairs = w.op("Reshape", [rot, w.ints("pairs_shape", [0, 0, 0, -1, 2])]);
      const [even, odd] = w.ops("Split", [pairs, w.ints("pair_split", [1, 1])], { axis: 4 }, 2) as [string, string];
      const c = w.op("Unsqueeze", [cos, w.ints("axes_4", [4])]);
      const s = w.op("Unsqueeze", [sin, w.ints("axes_4", [4])]);
      const e = w.op("Sub", [w.op("Mul", [even, c]), w.op("Mul", [odd, s])]);
      const o = w.op("Add", [w.op("Mul", [odd, c]), w.op("Mul", [even, s])]);
      turned = w.op("Reshape", [w.op("Concat", [e, o], { axis: 4 }), w.ints("unpairs_shape", [0, 0, 0, -1])]);
    } else {
      // Halves: (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin).
      const split = w.op("Concat", [half, half], { axis: 0 });
      const [x1, x2] = w.ops("Split", [rot, split], { axis: 3 }, 2) as [string, string];
      const a = w.op("Sub", [w.op("Mul", [x1, cos]), w.op("Mul", [x2, sin])]);
      const b = w.op("Add", [w.op("Mul", [x2, cos]), w.op("Mul", [x1, sin])]);
      turned = w.op("Concat", [a, b], { axis: 3 });
    }
    return w.op("Concat", [turned, rest], { axis: 3 });
  };
}

/**
 * The present cache as the CPU kernel lays it out, [B, KV, P+S, hd]: slot t of row b holds past slot t
 * (t < kept_b), new token t − kept_b (t < kept_b + S), else zero. Returns the builder of one cache (key or value)
 * from its past (absent: P = 0) and new entries, and the slot numbers t, [1, P+S].
 */
function presentCache(
  w: Writer,
  pastKey: string | undefined,
  kept: string,
  S: string,
): { build: (past: string | undefined, fresh: string) => string; slots: string } {
  const P = pastKey
    ? w.op("Gather", [w.op("Shape", [pastKey]), w.ints("two_1", [2])], { axis: 0 })
    : w.ints("zero_1", [0]);
  const [zero, one] = [w.ints("zero", [0], []), w.ints("one", [1], [])];
  const T = w.op("Squeeze", [w.op("Add", [P, S]), w.ints("axes_0", [0])]);
  const slots = w.op("Unsqueeze", [w.op("Range", [zero, T, one]), w.ints("axes_0", [0])]);
  const from = w.op("Unsqueeze", [kept, w.ints("axes_1", [1])]); // [B, 1]
  const end = w.op("Add", [from, S]);
  const fromNew = w.op("Sub", [w.op("Add", [slots, P]), from]);
  const inNew = w.op("Where", [w.op("Less", [slots, end]), fromNew, zero]);
  const source = w.op("Where", [w.op("Less", [slots, from]), slots, inNew]); // [B, P+S]
  const axes = w.ints("axes_13", [1, 3]);
  const index = w.op("Unsqueeze", [source, axes]);
  const valid = w.op("Unsqueeze", [w.op("Less", [slots, end]), axes]);
  const build = (past: string | undefined, fresh: string) => {
    const all = past ? w.op("Concat", [w.toFloat(past), fresh], { axis: 2 }) : fresh;
    const taken = w.op("GatherElements", [all, w.op("Expand", [index, w.op("Shape", [all])])], { axis: 2 });
    return w.op("Where", [valid, taken, w.float("zero_f", 0)]);
  };
  return { build, slots };
}

/** Pushes the nodes computing what `node` computes (see the file's comment). */
function writeOut(g: GraphBuilder, node: NodeProto, k: number): void {
  const [query, key, value, pastKey, pastValue, seqlensK] = node.input ?? [];
  const [output, presentKey, presentValue] = node.output ?? [];
  const H = attr(node, "num_heads", 0);
  const KV = attr(node, "kv_num_heads", 0);
  const w = new Writer(g, node, k);
  let [q, kNew, vNew] = headsOf(w, node, H, KV);
  const qShape = w.op("Shape", [q]);
  const S = w.op("Gather", [qShape, w.ints("two_1", [2])], { axis: 0 }); // [1]

  // n_b = seqlens_k + 1; kept_b = max(0, n_b − S); new token i at kept_b + i.
  const total = w.op("Add", [w.op("Cast", [seqlensK!], { to: DataType.INT64 }), w.ints("one", [1], [])]); // [B]
  const kept = w.op("Max", [w.op("Sub", [total, S]), w.ints("zero_1", [0])]); // [B]
  const count = w.op("Squeeze", [S, w.ints("axes_0", [0])]);
  const newSlots = w.op("Range", [w.ints("zero", [0], []), count, w.ints("one", [1], [])]);
  const positions = w.op("Add", [w.op("Unsqueeze", [kept, w.ints("axes_1", [1])]), newSlots]); // [B, S]
  if (attr(node, "do_rotary", 0) !== 0) {
    const rotate = rotation(w, node, positions);
    [q, kNew] = [rotate(q), rotate(kNew)];
  }

  const cache = presentCache(w, pastKey || undefined, kept, S);
  const keys = cache.build(pastKey || undefined, kNew);
  const values = cache.build(pastValue || undefined, vNew);
  const emit = (name: string | undefined, x: string, like: string) => {
    if (name) g.nodes.push({ name: `${w.scope}/${name}`, opType: "CastLike", input: [x, like], output: [name] });
  };
  emit(presentKey, keys, pastKey || key || query!);
  emit(presentValue, values, pastValue || value || query!);

  const rows = attend(w, node, { q, qShape, keys, values, positions, total, slots: cache.slots, KV, G: H / KV });
  g.nodes.push({ name: `${w.scope}/output`, opType: "CastLike", input: [rows, query!], output: [output!] });
}

/** What {@link attend} reads: [B, H, S, hd] queries, [B, KV, T, hd] caches, [B, S] positions, [B] lengths. */
interface AttentionParts {
  q: string;
  qShape: string;
  keys: string;
  values: string;
  positions: string;
  total: string;
  slots: string;
  KV: number;
  G: number;
}

/** Attention of the grouped heads over the caches, masked as the CPU kernel masks; [B, S, H·hd]. */
function attend(w: Writer, node: NodeProto, a: AttentionParts): string {
  const scaleAttr = attr(node, "scale", 0);
  const softcap = attr(node, "softcap", 0);
  const window = attr(node, "local_window_size", -1);
  // Scores [B, KV, G, S, T]: query head h reads key head h / G.
  const end = w.ints("end", [Number.MAX_SAFE_INTEGER]);
  const groupedShape = w.op(
    "Concat",
    [
      w.slice(a.qShape, w.ints("zero_1", [0]), w.ints("one_1", [1]), 0),
      w.ints("groups", [a.KV, a.G]),
      w.slice(a.qShape, w.ints("two_1", [2]), end, 0),
    ],
    { axis: 0 },
  );
  const grouped = w.op("Reshape", [a.q, groupedShape]);
  const keysT = w.op("Transpose", [w.op("Unsqueeze", [a.keys, w.ints("axes_2", [2])])], { perm: [0, 1, 2, 4, 3] });
  let scale: string;
  if (scaleAttr !== 0) scale = w.float("scale", scaleAttr);
  else {
    const hd = w.op("Gather", [a.qShape, w.ints("three", [3], [])], { axis: 0 });
    scale = w.op("Reciprocal", [w.op("Sqrt", [w.op("Cast", [hd], { to: DataType.FLOAT })])]);
  }
  let scores = w.op("Mul", [w.op("MatMul", [grouped, keysT]), scale]);
  if (softcap > 0) {
    const cap = w.float("softcap", softcap);
    scores = w.op("Mul", [w.op("Tanh", [w.op("Div", [scores, cap])]), cap]);
  }

  // Key j is seen by query i of row b where j ≤ kept_b + i, j < n_b, and j > kept_b + i − window.
  const j = w.op("Reshape", [a.slots, w.ints("keys_shape", [1, 1, 1, 1, -1])]);
  const at = w.op("Reshape", [a.positions, w.ints("queries_shape", [0, 1, 1, -1, 1])]);
  const n = w.op("Reshape", [a.total, w.ints("rows_shape", [-1, 1, 1, 1, 1])]);
  let seen = w.op("And", [w.op("Not", [w.op("Greater", [j, at])]), w.op("Less", [j, n])]);
  if (window > 0) {
    const first = w.op("Sub", [at, w.ints("window", [window], [])]);
    seen = w.op("And", [seen, w.op("Greater", [j, first])]);
  }
  const masked = w.op("Where", [seen, scores, w.float("masked", FLOAT32_LOWEST)]);
  const probs = w.op("Softmax", [masked], { axis: -1 });
  const context = w.op("MatMul", [probs, w.op("Unsqueeze", [a.values, w.ints("axes_2", [2])])]); // [B, KV, G, S, hd]
  const bsnh = w.op("Transpose", [context], { perm: [0, 3, 1, 2, 4] });
  return w.op("Reshape", [bsnh, w.ints("out_shape", [0, 0, -1])]);
}
