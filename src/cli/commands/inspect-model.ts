import type { Command } from "commander";

import { DEFAULT_LAYER_RULE } from "../../defaults.js";
import { inspectModel, tensorMethod, type ModelInspection } from "../../index.js";
import { MODEL_FILE_HELP } from "../options.js";
import { out } from "../print.js";

/** What each feed kind receives, in words. */
const FEED_WORDS: Record<string, string> = {
  input_ids: "token ids",
  attention_mask: "mask (0 on padding)",
  position_ids: "cumsum(mask) − 1",
  past: "empty KV cache",
  use_cache_branch: "false",
};

/** The inspection with each stored tensor's method, as `--json` prints it. */
function report(i: ModelInspection) {
  return {
    ...i,
    plan: { ...i.plan, tensors: i.plan.tensors.map((t) => ({ ...t, method: tensorMethod(i.plan.strategy, t) })) },
  };
}

function printInspection(dir: string, rule: string, i: ModelInspection): void {
  out(
    `${dir}: ${i.numLayers} decoder blocks, d_model ${i.dModel}, vocabulary ${i.vocabSize} (tokenizer ${i.tokenizerSize})`,
  );
  out(`style: ${i.plan.strategy}; computes in ${i.format.dtype}, weights ${i.format.weights}`);
  out(`inputs: ${i.inputs.map((v) => `${v.name} [${(v.shape ?? []).join(", ")}]`).join(", ")}`);
  const { feeds, unknown } = i.plan.inputs;
  // Without a mask no prompt is padded, and positions count every token.
  const words = (kind: string) => (i.sameLength && kind === "position_ids" ? "0…n−1" : (FEED_WORDS[kind] ?? kind));
  const padding = i.sameLength
    ? "prompts never padded: no attention_mask, so a batch holds prompts of one length"
    : `prompts ${i.promptPadding}-padded`;
  out(`feeds (${padding}): ${feeds.map((f) => `${f.name} ← ${words(f.kind)}${f.int32 ? " (int32)" : ""}`).join("; ")}`);
  if (unknown.length) out(`not fed: ${unknown.join(", ")} (a run stops if the stored layers read them)`);
  out(
    `outputs: ${i.outputs.length > 6 ? `${i.outputs.slice(0, 6).join(", ")}, … (${i.outputs.length})` : i.outputs.join(", ")}`,
  );
  out(`special prefix tokens: ${i.addsPrefix.length ? i.addsPrefix.join(", ") : "none"}`);
  out(
    `hidden states found by ${[...i.plan.prepared, i.plan.strategy].join("+")}; stored layers (${rule}): ${i.storedLayers.join(", ")}`,
  );
  if (i.plan.crossCheck) out(`cross-check: ${i.plan.crossCheck}`);
  for (const l of i.storedLayers) {
    const t = i.plan.tensors.find((x) => x.layer === l)!;
    out(`  L${String(l).padStart(3, "0")}  ${t.tensor}  — ${t.how} [${tensorMethod(i.plan.strategy, t)}]`);
  }
}

export function inspectModelCommand(program: Command): void {
  program
    .command("inspect-model")
    .summary(
      "show what hsm finds in a model folder: style, dtype, weights, inputs, and the tensor stored for each layer",
    )
    .description(
      "Read a model folder (model.onnx, config.json, tokenizer.json, tokenizer_config.json) and print the number of " +
        "decoder blocks L, d_model, the export style recognized, the dtype the graph computes in and its weight format " +
        "(float32, float16, bfloat16, int4, int8, nf4), the inputs hsm will feed and how, the tokenizer's special prefix, " +
        "and for every stored layer the graph tensor chosen and the method that found it: structure, names " +
        "(/model/layers.N/…), graph outputs (hidden_states.N), or given (--hidden-tensors).",
    )
    .argument("<model-dir>", "model folder, or a hub id hf:ORG/NAME[@REVISION]")
    .option("--layers <expr>", "layer rule in l and L", DEFAULT_LAYER_RULE)
    .option(
      "--hidden-tensors <map>",
      "LAYER=TENSOR pairs, comma-separated; 'final' names the last block's post-norm state",
    )
    .option("--model-file <file>", MODEL_FILE_HELP)
    .option("--json", "print as JSON")
    .action(
      async (dir: string, opts: { layers: string; hiddenTensors?: string; modelFile?: string; json?: boolean }) => {
        const i = await inspectModel(dir, {
          layerRule: opts.layers,
          hiddenTensors: opts.hiddenTensors,
          modelFile: opts.modelFile,
        });
        if (opts.json) out(JSON.stringify(report(i), null, 2));
        else printInspection(dir, opts.layers, i);
      },
    );
}
