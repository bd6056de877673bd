import type { Command } from "commander";

import { createProgress, mergeShards } from "../../index.js";
import { out } from "../print.js";

async function action(outDir: string, shards: string[], opts: { quiet?: boolean }): Promise<void> {
  const progress = createProgress("merge", 0, { quiet: opts.quiet });
  const m = await mergeShards(outDir, shards, { onProgress: (d, t) => progress.update(d, t) });
  progress.end(`merge: ${shards.length} shards joined`);
  out(`${outDir}: ${m.query_ids.length} rows × ${m.d_model}, layers ${m.layers.join(", ")}, complete`);
}

export function mergeCommand(program: Command): void {
  program
    .command("merge")
    .summary("join shard stores into one store")
    .description(
      "Verify each shard store (made by hsm extract --shard K/N) and join them, in shard order, into one store whose " +
        "files and checksums equal a single-process run. Shards must come from one model, layer rule and bank, and cover " +
        "every row exactly once.",
    )
    .argument("<out>", "store folder to write")
    .argument("<shards...>", "shard store folders, in any order")
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
