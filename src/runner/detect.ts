/**
 * Finding the residual stream in an exported decoder graph: the output of every
 * decoder block and the final norm's output. In this order: graph outputs named
 * `hidden_states.N`; torch/optimum node names (`/model/layers.17/…`, the
 * block's last residual `Add`; the final norm after the last block); an
 * explicit mapping from the user. Detection that fails lists candidates rather
 * than guessing.
 */
import { HsmError } from "../errors.js";
import { graphIndex, type GraphProto, type NodeProto } from "./onnx-graph.js";

/** Where the stored state of one layer comes from. */
export interface HiddenTensor {
  layer: number;
  tensor: string;
  how: string;
}

export interface HiddenPlan {
  strategy: "graph-outputs" | "torch-names" | "explicit";
  /** One entry per decoder block; the last is the post-final-norm state. */
  tensors: HiddenTensor[];
  lastLayerFinalNorm: boolean;
}

export class DetectionError extends HsmError {}

const BLOCK = /^\/(?:model|transformer|gpt_neox|model\/decoder|model\/language_model)\/(?:layers|h|blocks|layer)\.(\d+)\//;
const FINAL_NORM = /^\/(?:model|transformer|gpt_neox|model\/decoder|model\/language_model)\/(?:norm|ln_f|final_layer_norm|final_layernorm|final_norm)\//;

/**
 * Parses `--hidden-tensors`: `LAYER=TENSOR` pairs separated by commas, where
 * LAYER is a block number (`final` names the last block's post-norm state).
 */
export function parseHiddenTensorMap(text: string, numLayers: number): Map<number, string> {
  const map = new Map<number, string>();
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf("=");
    if (eq <= 0) throw new HsmError(`Expected LAYER=TENSOR in --hidden-tensors but received "${part}"`);
    const key = part.slice(0, eq).trim();
    const layer = key === "final" ? numLayers - 1 : /^\d+$/.test(key) ? Number(key) : NaN;
    if (!Number.isSafeInteger(layer) || layer < 0 || layer >= numLayers) {
      throw new HsmError(`Expected a layer in 0…${numLayers - 1} or "final" in --hidden-tensors but received "${key}"`);
    }
    map.set(layer, part.slice(eq + 1).trim());
  }
  return map;
}

export function detectHiddenTensors(graph: GraphProto, numLayers: number, explicit?: Map<number, string>): HiddenPlan {
  const known = new Set<string>([
    ...(graph.node ?? []).flatMap((n) => n.output ?? []),
    ...(graph.input ?? []).map((v) => v.name!),
  ]);
  if (explicit && explicit.size > 0) {
    const tensors: HiddenTensor[] = [];
    for (let l = 0; l < numLayers; l++) {
      const t = explicit.get(l);
      if (t === undefined) continue;
      if (!known.has(t)) throw new DetectionError(`--hidden-tensors names "${t}" for layer ${l}, but the graph has no such tensor`);
      tensors.push({ layer: l, tensor: t, how: "given with --hidden-tensors" });
    }
    return { strategy: "explicit", tensors, lastLayerFinalNorm: explicit.has(numLayers - 1) };
  }

  // 1. Outputs already named hidden_states.N (N = 0 is the embeddings, N = L post-norm).
  const outs = new Set((graph.output ?? []).map((o) => o.name!));
  if (Array.from({ length: numLayers }, (_, l) => `hidden_states.${l + 1}`).every((n) => outs.has(n))) {
    return {
      strategy: "graph-outputs",
      tensors: Array.from({ length: numLayers }, (_, l) => ({
        layer: l,
        tensor: `hidden_states.${l + 1}`,
        how: l === numLayers - 1 ? "graph output hidden_states.L (after the final norm)" : `graph output hidden_states.${l + 1}`,
      })),
      lastLayerFinalNorm: true,
    };
  }

  // 2. torch/optimum node names.
  const { consumers } = graphIndex(graph);
  const blockOf = (n: NodeProto) => {
    const m = BLOCK.exec(n.name ?? "");
    return m ? Number(m[1]) : undefined;
  };
  const byBlock = new Map<number, NodeProto[]>();
  const normNodes: NodeProto[] = [];
  for (const n of graph.node ?? []) {
    const b = blockOf(n);
    if (b !== undefined) {
      let list = byBlock.get(b);
      if (!list) byBlock.set(b, (list = []));
      list.push(n);
    } else if (FINAL_NORM.test(n.name ?? "")) normNodes.push(n);
  }
  if (byBlock.size === 0) {
    throw new DetectionError(
      `no decoder blocks found: node names do not follow /model/layers.N/ and there are no hidden_states.N outputs. ` +
        `Name the tensors with --hidden-tensors; candidate tensors: ${candidates(graph)}`,
    );
  }
  if (byBlock.size !== numLayers || !byBlock.has(numLayers - 1)) {
    throw new DetectionError(`the graph has ${byBlock.size} decoder blocks by name but config.json says ${numLayers}`);
  }
  const tensors: HiddenTensor[] = [];
  for (let l = 0; l < numLayers - 1; l++) {
    const nodes = byBlock.get(l)!;
    const next = new Set(byBlock.get(l + 1) ?? []);
    // The residual output: an Add of this block read by the next block.
    const found = nodes.filter((n) => n.opType === "Add" && (n.output ?? []).some((o) => (consumers.get(o) ?? []).some((c) => next.has(c))));
    if (found.length === 0) {
      throw new DetectionError(
        `cannot find the residual output of block ${l}: no Add in /…layers.${l}/ feeds block ${l + 1}. ` +
          `Name it with --hidden-tensors ${l}=TENSOR; candidate tensors: ${candidates(graph, nodes)}`,
      );
    }
    const last = found[found.length - 1]!; // nodes are in topological order: the final residual comes last
    tensors.push({ layer: l, tensor: last.output![0]!, how: `last residual Add of block ${l} (${last.name})` });
  }
  // The final norm's output is the norm-scope tensor read outside the norm.
  const normSet = new Set(normNodes);
  const normOut = normNodes.flatMap((n) => (n.output ?? []).filter((o) => (consumers.get(o) ?? []).some((c) => !normSet.has(c)) || (graph.output ?? []).some((g) => g.name === o)));
  if (normOut.length !== 1) {
    throw new DetectionError(
      `cannot find the final norm after block ${numLayers - 1} (${normOut.length === 0 ? "no /model/norm/ output" : `several: ${normOut.join(", ")}`}). ` +
        `Name it with --hidden-tensors final=TENSOR; candidate tensors: ${candidates(graph, normNodes.length ? normNodes : byBlock.get(numLayers - 1))}`,
    );
  }
  tensors.push({ layer: numLayers - 1, tensor: normOut[0]!, how: `final norm output (${normNodes.at(-1)!.name})` });
  return { strategy: "torch-names", tensors, lastLayerFinalNorm: true };
}

/** A short list of tensors a user could name: Add and norm outputs, last ones first. */
function candidates(graph: GraphProto, nodes: NodeProto[] = graph.node ?? []): string {
  const names = nodes
    .filter((n) => ["Add", "Mul", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization"].includes(n.opType ?? ""))
    .flatMap((n) => n.output ?? [])
    .filter(Boolean)
    .slice(-12);
  return names.length ? names.join(", ") : "(none with a recognizable operator)";
}
