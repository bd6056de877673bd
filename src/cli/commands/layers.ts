import type { Command } from "commander";

import { DEFAULT_LAYER_RULE } from "../../defaults.js";
import { selectLayers } from "../../index.js";
import { intOption } from "../options.js";
import { out } from "../print.js";

export function layersCommand(program: Command): void {
  program
    .command("layers")
    .summary("print the layers a store keeps for a model of L blocks")
    .description(
      "Print the decoder blocks a store keeps for a model of L blocks. The rule is evaluated in exact rational arithmetic, so 0.4 means 2/5.",
    )
    .argument("<L>", "number of decoder blocks", intOption("L", 1))
    .option("--rule <expr>", "rule in l and L", DEFAULT_LAYER_RULE)
    .action(async (L: number, opts: { rule: string }) => {
      const stored = await selectLayers(L, opts.rule);
      out(`${stored.length} of ${L} layers (${opts.rule}): ${stored.join(", ")}`);
    });
}
