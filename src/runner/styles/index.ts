/**
 * The registry of graph styles, in the order they are tried; the first that
 * recognizes a graph locates its hidden states:
 *
 * 1. `explicit` — the user's `--hidden-tensors`, whenever given: a user who
 *    names tensors means them.
 * 2. `graph-outputs` — outputs `hidden_states.1 … hidden_states.L`: the
 *    exporter said where the states are.
 * 3. `genai` — onnxruntime-genai builds (GroupQueryAttention, SkipLayerNorm
 *    residuals), before torch-names: their nodes are named `/model/layers.N/`
 *    too, but they have no residual Add.
 * 4. `torch-names` — torch/optimum node names (`/model/layers.N/…`).
 *
 * Styles that are exact about the graph come before styles that infer from
 * naming habits. A new style is one file exporting a {@link GraphStyle} and
 * one line here, at the place its certainty puts it (docs/extract.md walks
 * through it).
 */
import { explicitStyle } from "./explicit.js";
import { genaiStyle } from "./genai.js";
import { graphOutputsStyle } from "./graph-outputs.js";
import type { GraphStyle } from "./style.js";
import { torchNamesStyle } from "./torch-names.js";

export const STYLES: readonly GraphStyle[] = [explicitStyle, graphOutputsStyle, genaiStyle, torchNamesStyle];
