/**
 * onnxruntime-genai model-builder graphs: no residual `Add`. The residual
 * stream is output 3 (`input_skip_bias_sum`) of the com.microsoft
 * `SkipSimplifiedLayerNormalization` (`SkipLayerNormalization` in LayerNorm
 * families) that opens the next block, `/model/layers.{l+1}/input_layernorm/
 * SkipLayerNorm`; the last block's stored state is output 0 of
 * `/model/layers.{L}/final_norm_layernorm/SkipLayerNorm`, the post-norm state.
 *
 * Attention is com.microsoft `GroupQueryAttention`, fed `seqlens_k` and
 * `total_sequence_length` that the graph computes from `attention_mask`. Its
 * CPU and CUDA kernels read a prompt's tokens from position 0 of each row and
 * position them 0…n−1 by themselves: a left-padded row is wrong (its tokens
 * get the positions of the padding before them, and the padding is attended
 * to), so these graphs are fed right-padded batches and the state is read at
 * each row's last real token (standardInputs pads any GroupQueryAttention
 * graph so, whichever style finds its states). Past inputs are matched by
 * name (`past_key_values.N.key` / `.value`, in any order).
 *
 * The structural style reads these graphs too (the Skip norms are fused
 * residual adds) and comes first; these names are then its cross-check, and
 * this style locates the states only where the structure cannot be followed.
 */
import type { NodeProto } from "../../onnx/graph.js";
import { DetectionError, type GraphStyle, type HiddenTensor } from "./style.js";

const SKIP_OPS = new Set(["SkipSimplifiedLayerNormalization", "SkipLayerNormalization"]);
const blockNorm = (l: number) => `/model/layers.${l}/input_layernorm/SkipLayerNorm`;
const finalNorm = (L: number) => `/model/layers.${L}/final_norm_layernorm/SkipLayerNorm`;

export const genaiStyle: GraphStyle = {
  name: "genai",
  notFound: "there is no GroupQueryAttention with SkipLayerNorm residuals (onnxruntime-genai)",
  recognize: (graph) => {
    const nodes = graph.node ?? [];
    return (
      nodes.some((n) => n.opType === "GroupQueryAttention") &&
      nodes.some((n) => SKIP_OPS.has(n.opType ?? "") && /\/SkipLayerNorm$/.test(n.name ?? ""))
    );
  },
  locate(graph, numLayers) {
    const byName = new Map<string, NodeProto>((graph.node ?? []).map((n) => [n.name ?? "", n]));
    const tensors: HiddenTensor[] = [];
    for (let l = 0; l < numLayers - 1; l++) {
      const node = byName.get(blockNorm(l + 1));
      const out = node?.output?.[3];
      if (!node || !SKIP_OPS.has(node.opType ?? "") || !out) {
        throw new DetectionError(
          `genai graph: cannot find the residual output of block ${l}: ${node ? `${blockNorm(l + 1)} has no output 3 (input_skip_bias_sum)` : `no node ${blockNorm(l + 1)}`}. ` +
            `Name it with --hidden-tensors ${l}=TENSOR`,
        );
      }
      tensors.push({ layer: l, tensor: out, how: `output 3 (input_skip_bias_sum) of ${node.name}` });
    }
    const last = byName.get(finalNorm(numLayers));
    if (!last?.output?.[0]) {
      const found = [...byName.keys()].filter((n) => n.includes("final_norm_layernorm"));
      throw new DetectionError(
        `genai graph: no final norm ${finalNorm(numLayers)} after block ${numLayers - 1}` +
          (found.length ? ` (found ${found.join(", ")}: does config say the right number of layers?)` : "") +
          `. Name it with --hidden-tensors final=TENSOR`,
      );
    }
    tensors.push({
      layer: numLayers - 1,
      tensor: last.output[0],
      how: `output 0 of ${last.name} (after the final norm)`,
    });
    return { tensors, lastLayerFinalNorm: true };
  },
};
