/**
 * The registry of graph styles, in the order they are tried; the first that
 * recognizes a graph locates its hidden states:
 *
 * 0. `optimum-merged` — an optimum merged decoder (one `If` on
 *    `use_cache_branch`) is prepared first: its no-past branch is inlined, and
 *    the styles below read the inlined graph (a style with `prepare` changes
 *    the graph rather than locating tensors in it).
 * 1. `explicit` — the user's `--hidden-tensors`, whenever given: a user who
 *    names tensors means them.
 * 2. `graph-outputs` — outputs `hidden_states.1 … hidden_states.L`: the
 *    exporter said where the states are.
 * 3. `structural` — the residual stream followed from the embedding to the
 *    LM head, or to the graph's output where it has none (structural.ts): it
 *    reads any graph whose embedding `Gather` reads `input_ids`, whatever its
 *    names, so it is tried for every such
 *    graph — onnxruntime-genai builds included, whose residual adds are fused
 *    into Skip norms — and checks genai or torch/optimum names against what
 *    it finds (a disagreement is a warning; structure wins).
 * 4. `genai` — onnxruntime-genai node names (`/model/layers.N/
 *    input_layernorm/SkipLayerNorm` and its output 3), for genai graphs whose
 *    structure cannot be followed from an embedding.
 * 5. `torch-names` — torch/optimum node names (`/model/layers.N/…`), for
 *    graphs whose structure cannot be followed from an embedding.
 *
 * Styles that are exact about the graph come before styles that infer, and
 * structure before naming habits. A new style is one file exporting a {@link GraphStyle} and
 * one line here, at the place its certainty puts it (docs/extract.md walks
 * through it).
 */
import { explicitStyle } from "./explicit.js";
import { genaiStyle } from "./genai.js";
import { graphOutputsStyle } from "./graph-outputs.js";
import { optimumMergedStyle } from "./optimum-merged.js";
import type { GraphStyle } from "./style.js";
import { structuralStyle } from "./structural.js";
import { torchNamesStyle } from "./torch-names.js";

export const STYLES: readonly GraphStyle[] = [
  optimumMergedStyle,
  explicitStyle,
  graphOutputsStyle,
  structuralStyle,
  genaiStyle,
  torchNamesStyle,
];
