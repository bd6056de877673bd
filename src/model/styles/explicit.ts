/**
 * The user's own mapping, `--hidden-tensors 17=TENSOR,…,final=TENSOR`: it
 * applies to any graph and wins over every other style when given.
 */
import { UsageError } from "../../errors.js";
import { DetectionError, type GraphStyle, type HiddenTensor } from "./style.js";

/**
 * Parses `--hidden-tensors`: `LAYER=TENSOR` pairs separated by commas, where
 * LAYER is a block number (`final` names the last block's post-norm state).
 */
export function parseHiddenTensorMap(text: string, numLayers: number): Map<number, string> {
  const map = new Map<number, string>();
  for (const part of text
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)) {
    const eq = part.indexOf("=");
    if (eq <= 0) throw new UsageError(`Expected LAYER=TENSOR in --hidden-tensors but received "${part}"`);
    const key = part.slice(0, eq).trim();
    const layer = key === "final" ? numLayers - 1 : /^\d+$/.test(key) ? Number(key) : NaN;
    if (!Number.isSafeInteger(layer) || layer < 0 || layer >= numLayers) {
      throw new UsageError(
        `Expected a layer in 0…${numLayers - 1} or "final" in --hidden-tensors but received "${key}"`,
      );
    }
    map.set(layer, part.slice(eq + 1).trim());
  }
  return map;
}

export const explicitStyle: GraphStyle = {
  name: "explicit",
  recognize: (_graph, { given }) => given !== undefined && given.size > 0,
  locate(graph, numLayers, { given }) {
    const known = new Set<string>([
      ...(graph.node ?? []).flatMap((n) => n.output ?? []),
      ...(graph.input ?? []).map((v) => v.name!),
    ]);
    const tensors: HiddenTensor[] = [];
    for (let l = 0; l < numLayers; l++) {
      const t = given?.get(l);
      if (t === undefined) continue;
      if (!known.has(t))
        throw new DetectionError(`--hidden-tensors names "${t}" for layer ${l}, but the graph has no such tensor`);
      tensors.push({ layer: l, tensor: t, how: "given with --hidden-tensors" });
    }
    return { tensors, lastLayerFinalNorm: given?.has(numLayers - 1) ?? false };
  },
};
