/**
 * com.microsoft `GroupQueryAttention` written out in standard ONNX operators,
 * computing what onnxruntime's CPU kernel computes, for devices whose own
 * kernel computes something else (onnxruntime-node's WebGPU kernel: states a
 * few percent away, and right-padded rows that depend on their batch).
 *
 * The CPU kernel, for row b with `seqlens_k[b] + 1 = n_b` valid tokens and S
 * new ones: past_b = max(0, n_b − S) tokens of the past are kept (0 on the first
 * prompt, where the cache is empty), and new token i sits at position
 * past_b + i — its rotary position and its slot in the present cache, which
 * holds the kept past, the S new tokens, and zeros after them. Query i
 * attends to keys j ≤ past_b + i, j < n_b (and j > past_b + i − window with a
 * local window: the window's last keys), on scores scaled, then soft-capped, then softmaxed. Queries
 * of a right-padded prompt's padding see what they see here, which no real
 * token reads (masked with the lowest float, not −∞, so that a padding query a
 * local window leaves without keys averages them instead of giving NaN, which
 * a zero weight would carry into real tokens). Everything is computed in float32, as the CPU kernel does
 * (its float16 variant widens too), and cast back to the graph's type.
 * `total_sequence_length` only sizes the kernel's present buffer, which is
 * past + S whenever hsm feeds the graph.
 */
import { DataType, GraphBuilder, num, type GraphProto, type ModelProto, type NodeProto } from "./graph.js";

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
  const opset = num((model.opsetImport ?? []).find((o) => !o.domain || o.domain === "ai.onnx")?.version ?? 0);
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

/** The nodes of one GroupQueryAttention node; constants are named per node (`k`) so that none is shared. */
function writeOut(g: GraphBuilder, node: NodeProto, k: number): void {
  const [query, key, value, pastKey, pastValue, seqlensK, , cosCache, sinCache] = node.input ?? [];
  const [output, presentKey, presentValue] = node.output ?? [];
  const H = attr(node, "num_heads", 0);
  const KV = attr(node, "kv_num_heads", 0);
  const G = H / KV;
  const scaleAttr = attr(node, "scale", 0);
  const softcap = attr(node, "softcap", 0);
  const window = attr(node, "local_window_size", -1);
  const rotary = attr(node, "do_rotary", 0) !== 0;
  const interleaved = attr(node, "rotary_interleaved", 0) !== 0;
  const S0 = `${node.name}/hsm`;
  const c = `/hsm/gqa.${k}`;
  const ints = (name: string, values: number[], dims?: number[]) => g.ints(`${c}/${name}`, values, dims);
  const float = (name: string, v: number) => g.floats(`${c}/${name}`, Float32Array.of(v), []);
  const op = (type: string, inputs: string[], attrs: Parameters<GraphBuilder["op1"]>[3] = {}) =>
    g.op1(S0, type, inputs, attrs);
  const toFloat = (x: string) => op("Cast", [x], { to: DataType.FLOAT });
  const bnsh = (x: string) => op("Transpose", [x], { perm: [0, 2, 1, 3] });

  // [B, S, N·hd] → [B, N, S, hd] in float32, for the query and the new keys and values (packed or not).
  let q: string, kNew: string, vNew: string;
  if (!key) {
    const heads = op("Reshape", [query!, ints("packed_shape", [0, 0, H + 2 * KV, -1])]);
    const parts = g.op(S0, "Split", [heads, ints("packed_split", [H, KV, KV])], { axis: 2 }, 3);
    [q, kNew, vNew] = parts.map((p) => toFloat(bnsh(p))) as [string, string, string];
  } else {
    q = toFloat(bnsh(op("Reshape", [query!, ints("q_shape", [0, 0, H, -1])])));
    kNew = toFloat(bnsh(op("Reshape", [key, ints("kv_shape", [0, 0, KV, -1])])));
    vNew = toFloat(bnsh(op("Reshape", [value!, ints("kv_shape", [0, 0, KV, -1])])));
  }
  const qShape = op("Shape", [q]);
  const S = op("Gather", [qShape, ints("two", [2], [])], { axis: 0 }); // scalar
  const S1 = op("Unsqueeze", [S, ints("axes_0", [0])]); // [1]
  const zero = ints("zero", [0], []);
  const one = ints("one", [1], []);

  // n_b = seqlens_k + 1; past_b = max(0, n_b − S); new token i at past_b + i.
  const total = op("Add", [op("Cast", [seqlensK!], { to: DataType.INT64 }), one]); // [B]
  const kept = op("Max", [op("Sub", [total, S1]), ints("zero_1", [0])]); // [B]
  const positions = op("Add", [op("Unsqueeze", [kept, ints("axes_1", [1])]), op("Range", [zero, S, one])]); // [B, S]

  if (rotary) {
    const cos = op("Unsqueeze", [op("Gather", [toFloat(cosCache!), positions], { axis: 0 }), ints("axes_1", [1])]);
    const sin = op("Unsqueeze", [op("Gather", [toFloat(sinCache!), positions], { axis: 0 }), ints("axes_1", [1])]);
    const half = op("Gather", [op("Shape", [cosCache!]), ints("one_1", [1])], { axis: 0 }); // [1]
    const rotate = (x: string): string => {
      const slice = (from: string, to: string) => op("Slice", [x, from, to, ints("axes_3", [3])]);
      const width = op("Mul", [half, ints("two_1", [2])]);
      const rot = slice(ints("zero_1", [0]), width);
      const rest = slice(width, ints("end", [Number.MAX_SAFE_INTEGER]));
      let turned: string;
      if (interleaved) {
        // Pairs (2i, 2i+1) turn by the angle of i.
        const pairs = op("Reshape", [rot, ints("pairs_shape", [0, 0, 0, -1, 2])]);
        const [even, odd] = g.op(S0, "Split", [pairs, ints("pair_split", [1, 1])], { axis: 4 }, 2) as [string, string];
        const c5 = op("Unsqueeze", [cos, ints("axes_4", [4])]);
        const s5 = op("Unsqueeze", [sin, ints("axes_4", [4])]);
        const e = op("Sub", [op("Mul", [even, c5]), op("Mul", [odd, s5])]);
        const o = op("Add", [op("Mul", [odd, c5]), op("Mul", [even, s5])]);
        turned = op("Reshape", [op("Concat", [e, o], { axis: 4 }), ints("unpairs_shape", [0, 0, 0, -1])]);
      } else {
        // Halves: (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin).
        const [x1, x2] = g.op(S0, "Split", [rot, op("Concat", [half, half], { axis: 0 })], { axis: 3 }, 2) as [
          string,
          string,
        ];
        const a = op("Sub", [op("Mul", [x1, cos]), op("Mul", [x2, sin])]);
        const b = op("Add", [op("Mul", [x2, cos]), op("Mul", [x1, sin])]);
        turned = op("Concat", [a, b], { axis: 3 });
      }
      return op("Concat", [turned, rest], { axis: 3 });
    };
    q = rotate(q);
    kNew = rotate(kNew);
  }

  // The present cache, [B, KV, P+S, hd]: slot t of row b holds past t (t < past_b), new token t − past_b
  // (t < past_b + S), else zero.
  const slotIndex = (() => {
    const P = pastKey ? op("Gather", [op("Shape", [pastKey]), ints("two_1", [2])], { axis: 0 }) : ints("zero_1", [0]);
    const T = op("Add", [P, S1]);
    const t = op("Unsqueeze", [op("Range", [zero, op("Squeeze", [T, ints("axes_0", [0])]), one]), ints("axes_0", [0])]);
    const pb = op("Unsqueeze", [kept, ints("axes_1", [1])]); // [B, 1]
    const end = op("Add", [pb, S1]);
    const fromNew = op("Sub", [op("Add", [t, P]), pb]);
    const index = op("Where", [op("Less", [t, pb]), t, op("Where", [op("Less", [t, end]), fromNew, zero])]); // [B, T]
    const axes = ints("axes_13", [1, 3]);
    return { index: op("Unsqueeze", [index, axes]), valid: op("Unsqueeze", [op("Less", [t, end]), axes]), t };
  })();
  const present = (past: string | undefined, fresh: string): string => {
    const all = past ? op("Concat", [toFloat(past), fresh], { axis: 2 }) : fresh;
    const taken = op("GatherElements", [all, op("Expand", [slotIndex.index, op("Shape", [all])])], { axis: 2 });
    return op("Where", [slotIndex.valid, taken, float("zero_f", 0)]);
  };
  const keys = present(pastKey, kNew);
  const values = present(pastValue, vNew);
  const emit = (name: string | undefined, x: string, like: string) => {
    if (name) g.nodes.push({ name: `${S0}/${name}`, opType: "CastLike", input: [x, like], output: [name] });
  };
  emit(presentKey, keys, pastKey || key || query!);
  emit(presentValue, values, pastValue || value || query!);

  // Scores [B, KV, G, S, T]: query head h reads key head h / G.
  const grouped = op("Reshape", [
    q,
    op(
      "Concat",
      [
        op("Slice", [qShape, ints("zero_1", [0]), ints("one_1", [1])]),
        ints("groups", [KV, G]),
        op("Slice", [qShape, ints("two_1", [2]), ints("end", [Number.MAX_SAFE_INTEGER])]),
      ],
      { axis: 0 },
    ),
  ]);
  const keysT = op("Transpose", [op("Unsqueeze", [keys, ints("axes_2", [2])])], { perm: [0, 1, 2, 4, 3] });
  let scale: string;
  if (scaleAttr !== 0) scale = float("scale", scaleAttr);
  else {
    const hd = op("Cast", [op("Gather", [qShape, ints("three", [3], [])], { axis: 0 })], { to: DataType.FLOAT });
    scale = op("Reciprocal", [op("Sqrt", [hd])]);
  }
  let scores = op("Mul", [op("MatMul", [grouped, keysT]), scale]);
  if (softcap > 0)
    scores = op("Mul", [op("Tanh", [op("Div", [scores, float("softcap", softcap)])]), float("softcap", softcap)]);

  // Key j is seen by query i of row b where j ≤ past_b + i, j < n_b, and j > past_b + i − window.
  const j = op("Reshape", [slotIndex.t, ints("keys_shape", [1, 1, 1, 1, -1])]);
  const at = op("Reshape", [positions, ints("queries_shape", [0, 1, 1, -1, 1])]);
  const n = op("Reshape", [total, ints("rows_shape", [-1, 1, 1, 1, 1])]);
  let seen = op("And", [op("Not", [op("Greater", [j, at])]), op("Less", [j, n])]);
  if (window > 0)
    seen = op("And", [seen, op("Not", [op("Less", [j, op("Sub", [at, ints("window", [window - 1], [])])])])]);
  const probs = op("Softmax", [op("Where", [seen, scores, float("masked", FLOAT32_LOWEST)])], { axis: -1 });
  const context = op("MatMul", [probs, op("Unsqueeze", [values, ints("axes_2", [2])])]); // [B, KV, G, S, hd]
  const rows = op("Reshape", [op("Transpose", [context], { perm: [0, 3, 1, 2, 4] }), ints("out_shape", [0, 0, -1])]);
  g.nodes.push({ name: `${S0}/output`, opType: "CastLike", input: [rows, query!], output: [output!] });
}
