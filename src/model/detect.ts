/**
 * Finding the residual stream in an exported decoder graph: the output of every
 * decoder block and the final norm's output. The graph styles of the registry
 * (styles/index.ts) are tried in order and the first that recognizes the graph
 * locates the tensors; when none does, the error lists candidate tensors rather
 * than guessing.
 */
import { STYLES } from "./styles/index.js";
import {
  candidates,
  DetectionError,
  type GraphStyle,
  type HiddenTensor,
  type InputPlan,
  standardInputs,
} from "./styles/style.js";
import type { StyleRecord } from "../store/manifest.js";
import type { GraphProto } from "../onnx/graph.js";

export { parseHiddenTensorMap } from "./styles/explicit.js";
export { DetectionError, type HiddenTensor };

export interface HiddenPlan {
  /** The name of the style that recognized the graph. */
  strategy: string;
  /** One entry per decoder block found; the last is the post-final-norm state where `lastLayerFinalNorm`. */
  tensors: HiddenTensor[];
  lastLayerFinalNorm: boolean;
  /** How the graph's inputs are fed, and the padding side. */
  inputs: InputPlan;
  /** Styles that prepared the graph before `strategy` located the tensors (e.g. a merged decoder inlined), in order. */
  prepared: string[];
  /** What a second method said about the same tensors (names beside structure). */
  crossCheck?: string;
  /** Disagreements to show the user; the plan stands. */
  warnings: string[];
}

/** The style as recorded: the preparing styles, then the one that located the tensors (`optimum-merged+structural`). */
function styleName(plan: Pick<HiddenPlan, "prepared" | "strategy">): string {
  return [...plan.prepared, plan.strategy].join("+");
}

/** The manifest's `style` field for the stored tensors of a plan. */
export function styleRecord(plan: HiddenPlan, stored: HiddenTensor[]): StyleRecord {
  return {
    name: styleName(plan),
    ...(plan.crossCheck ? { cross_check: plan.crossCheck } : {}),
    layers: stored.map(({ layer, tensor, how }) => ({ layer, tensor, how })),
  };
}

/**
 * How a graph's inputs are fed: the plan of the first style that recognizes
 * it, or feeding by name when none does (generation needs no hidden states).
 */
export function planInputs(graph: GraphProto, numLayers: number, styles: readonly GraphStyle[] = STYLES): InputPlan {
  const style = styles.find((s) => s.recognize(graph, { numLayers }));
  return (style?.inputs ?? standardInputs)(graph);
}

export function detectHiddenTensors(
  graph: GraphProto,
  numLayers: number,
  given?: ReadonlyMap<number, string>,
  styles: readonly GraphStyle[] = STYLES,
  layersFrom?: string,
): HiddenPlan {
  const context = { numLayers, given, ...(layersFrom ? { layersFrom } : {}) };
  // Styles that prepare a graph (inline a merged decoder's branch) run first; the others then read the prepared graph.
  const prepared: GraphStyle[] = [];
  let style: GraphStyle | undefined;
  for (;;) {
    style = styles.find((s) => !prepared.includes(s) && s.recognize(graph, context));
    if (!style?.prepare) break;
    style.prepare(graph);
    prepared.push(style);
  }
  if (!style) {
    // Most general first: what the graph lacks, then the remedy.
    const lacks = styles.flatMap((s) => (s.notFound ? [s.notFound] : [])).reverse();
    throw new DetectionError(
      `no decoder blocks found: ${lacks.join(" and ")}. Name the tensors with --hidden-tensors; candidate tensors: ${candidates(graph)}`,
    );
  }
  const { tensors, lastLayerFinalNorm, crossCheck, warnings } = style.locate(graph, numLayers, context);
  const inputs = (prepared.find((s) => s.inputs)?.inputs ?? style.inputs ?? standardInputs)(graph);
  return {
    strategy: style.name,
    tensors,
    lastLayerFinalNorm,
    inputs,
    prepared: prepared.map((s) => s.name),
    ...(crossCheck ? { crossCheck } : {}),
    warnings: warnings ?? [],
  };
}
