import type { Command } from "commander";

import { DEFAULT_LAYER_RULE } from "../../defaults.js";
import { inspectModel, type ModelInspection } from "../../index.js";
import { out } from "../print.js";

function printInspection(dir: string, rule: string, i: ModelInspection): void {
  out(`${dir}: ${i.numLayers} decoder blocks, d_model ${i.dModel}, vocabulary ${i.vocabSize} (tokenizer ${i.tokenizerSize})`);
  out(`inputs: ${i.inputs.map((v) => `${v.name} [${(v.shape ?? []).join(", ")}]`).join(", ")}`);
  out(`outputs: ${i.outputs.length > 6 ? `${i.outputs.slice(0, 6).join(", ")}, … (${i.outputs.length})` : i.outputs.join(", ")}`);
  out(`special prefix tokens: ${i.addsPrefix.length ? i.addsPrefix.join(", ") : "none"}`);
  out(`hidden states found by ${[...i.plan.prepared, i.plan.strategy].join("+")}; stored layers (${rule}): ${i.storedLayers.join(", ")}`);
  if (i.plan.crossCheck) out(`cross-check: ${i.plan.crossCheck}`);
  for (const l of i.storedLayers) {
    const t = i.plan.tensors.find((x) => x.layer === l)!;
    out(`  L${String(l).padStart(3, "0")}  ${t.tensor}  — ${t.how}`);
  }
}

export function inspectModelCommand(program: Command): void {
  program
    .command("inspect-model")
    .summary("show what hsm finds in a model folder: layers, width, and the tensor stored for each layer")
    .description(
      "Read a model folder (model.onnx, config.json, tokenizer.json, tokenizer_config.json) and print the number of " +
        "decoder blocks L, d_model, the tokenizer's special prefix, and for every stored layer the graph tensor chosen " +
        "and how it was found: graph outputs named hidden_states.N, the graph's structure (residual stream; torch/optimum " +
        "node names such as /model/layers.N/… as a cross-check), node names alone, or --hidden-tensors.",
    )
    .argument("<model-dir>", "model folder")
    .option("--layers <expr>", "layer rule in l and L", DEFAULT_LAYER_RULE)
    .option("--hidden-tensors <map>", "LAYER=TENSOR pairs, comma-separated; 'final' names the last block's post-norm state")
    .option("--json", "print as JSON")
    .action(async (dir: string, opts: { layers: string; hiddenTensors?: string; json?: boolean }) => {
      const i = await inspectModel(dir, { layerRule: opts.layers, hiddenTensors: opts.hiddenTensors });
      if (opts.json) out(JSON.stringify(i, null, 2));
      else printInspection(dir, opts.layers, i);
    });
}
