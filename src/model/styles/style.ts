/**
 * A graph style: one way an exporter lays out a decoder, and how `hsm` finds
 * the residual stream in it and feeds it. Styles are registered units (see
 * index.ts); extraction and `inspect-model` try them in the registry's order
 * and use the first that recognizes the graph.
 */
import { HsmError } from "../../errors.js";
import { isPastInput } from "../../onnx/kv-cache.js";
import { DataType, valueShape, type GraphProto, type NodeProto } from "../../onnx/graph.js";
import type { HiddenTensor } from "../../onnx/rewrite.js";

export type { HiddenTensor };

/** What a style found: per decoder block, the tensor holding its output. */
export interface Located {
  /** One entry per block found, ascending; the last block's is post-final-norm where `lastLayerFinalNorm`. */
  tensors: HiddenTensor[];
  lastLayerFinalNorm: boolean;
  /** What a second method says about the same tensors (e.g. names beside structure), for `inspect-model` and the manifest. */
  crossCheck?: string;
  /** Disagreements the user should see; detection still succeeded. */
  warnings?: string[];
}

/**
 * How a graph input is fed: the token ids, the mask, `position_ids`
 * (`cumsum(mask) − 1`), an empty KV-cache input (`past`), or a merged
 * decoder's `use_cache_branch` (false: no cache on a full prompt).
 */
export type FeedKind = "input_ids" | "attention_mask" | "position_ids" | "past" | "use_cache_branch";

/** How a style's graph is run. */
export interface InputPlan {
  /**
   * Every input fed, with its declared shape (numbers for fixed dimensions); `int32` for token ids, a mask or
   * positions declared int32 (fed as int32; int64 otherwise), `float16` for a float16 KV-cache input.
   */
  feeds: { name: string; kind: FeedKind; dims: (number | string)[]; int32?: boolean; float16?: boolean }[];
  /** Graph inputs no feed kind covers: a run stops on them with an error naming them. */
  unknown: string[];
  /** Where batches are padded; "right" for graphs whose attention ignores a left-padding mask. */
  paddingSide: "left" | "right";
}

/** Context of a detection: the number of decoder blocks (config.json), and the user's `--hidden-tensors` when given. */
export interface StyleContext {
  numLayers: number;
  given?: ReadonlyMap<number, string>;
  /** Where `numLayers` was read, as messages name it: `config.json's num_hidden_layers` where absent. */
  layersFrom?: string;
}

export interface GraphStyle {
  /** Recorded as the plan's `strategy` (and shown by `inspect-model`). */
  readonly name: string;
  /** What the graph lacks when the style does not apply, for the error listing what was tried; absent for styles that apply only on request. */
  readonly notFound?: string;
  /** True when the graph is laid out in this style; cheap, and never throws. */
  recognize(graph: GraphProto, context: StyleContext): boolean;
  /** The tensor of each block in `[0, numLayers)`; a {@link DetectionError} listing candidates when one cannot be found. */
  locate(graph: GraphProto, numLayers: number, context: StyleContext): Located;
  /**
   * For styles that turn a graph into one other styles read (a merged
   * decoder's branch inlined): rewrites `graph` in place. Detection then goes
   * on with the other styles, and extraction rewrites the prepared graph.
   */
  prepare?(graph: GraphProto): void;
  /** How the graph's inputs are fed and padded; {@link standardInputs} when absent. */
  inputs?(graph: GraphProto): InputPlan;
}

/** Hidden states that cannot be found as asked, with what to do. */
export class DetectionError extends HsmError {}

/**
 * The padding a graph's attention needs: right for com.microsoft
 * `GroupQueryAttention`, whose CPU and CUDA kernels read a prompt's tokens
 * from position 0 of each row and position them 0…n−1 themselves (a
 * left-padded row gets its padding's positions and attends to the padding);
 * left otherwise, the mask hiding the padding.
 */
function paddingSideOf(graph: GraphProto): InputPlan["paddingSide"] {
  return (graph.node ?? []).some((n) => n.opType === "GroupQueryAttention") ? "right" : "left";
}

/** Inputs fed by name, as optimum exports name them; padded as {@link paddingSideOf} says, whichever style found the states. */
export function standardInputs(graph: GraphProto): InputPlan {
  const feeds: InputPlan["feeds"] = [];
  const unknown: string[] = [];
  const direct = new Set<string>(["input_ids", "attention_mask", "position_ids", "use_cache_branch"]);
  for (const v of graph.input ?? []) {
    const name = v.name!;
    const dims = valueShape(v) ?? [];
    const int32 = v.type?.tensorType?.elemType === DataType.INT32;
    if (direct.has(name)) feeds.push({ name, kind: name as FeedKind, dims, ...(int32 ? { int32 } : {}) });
    // CUDA builds take float16 KV-cache inputs.
    else if (isPastInput(name))
      feeds.push({
        name,
        kind: "past",
        dims,
        ...(v.type?.tensorType?.elemType === DataType.FLOAT16 ? { float16: true } : {}),
      });
    else unknown.push(name);
  }
  return { feeds, unknown, paddingSide: paddingSideOf(graph) };
}

/** A residual add fused with the norm after it (com.microsoft): inputs 0 and 1 summed, output 3 the sum, output 0 normalized. */
const SKIP_NORMS = new Set(["SkipSimplifiedLayerNormalization", "SkipLayerNormalization"]);
export const isSkipNorm = (n: NodeProto) =>
  SKIP_NORMS.has(n.opType ?? "") && (!n.domain || n.domain === "com.microsoft");

/** A short list of tensors a user could name: Add and norm outputs, last ones first. */
export function candidates(graph: GraphProto, nodes: NodeProto[] = graph.node ?? []): string {
  const names = nodes
    .filter((n) =>
      ["Add", "Mul", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization"].includes(
        n.opType ?? "",
      ),
    )
    .flatMap((n) => n.output ?? [])
    .filter(Boolean)
    .slice(-12);
  return names.length ? names.join(", ") : "(none with a recognizable operator)";
}
