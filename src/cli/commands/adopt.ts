import { readFile } from "node:fs/promises";
import { join } from "node:path";

import type { Command } from "commander";

import { adoptStore, adoptVllm, UsageError } from "../../index.js";
import { choiceOption, intOption, parseLayerList } from "../options.js";

/** The options that only a vLLM folder takes, as written on the command line. */
const VLLM_ONLY = [
  ["out", "--out"],
  ["requests", "--requests"],
  ["layerIds", "--layer-ids"],
  ["numLayers", "--num-layers"],
] as const;

interface AdoptFlags {
  bank: string;
  from: "npy" | "vllm";
  model?: string;
  jobs?: number;
  out?: string;
  requests?: string;
  layerIds?: number[];
  numLayers?: number;
}

function layerIds(value: string): number[] {
  try {
    return parseLayerList(value);
  } catch {
    throw new UsageError(`Expected --layer-ids like 8,16,24-28 (vLLM's layer ids) but received "${value}"`);
  }
}

export function adoptCommand(program: Command): void {
  program
    .command("adopt")
    .summary("give a store written by another tool a conforming index.json, or make one from vLLM's files")
    .description(
      "Write a conforming index.json for a folder of L###.npy files written by another tool: the rows are the bank's " +
        "main-forward queries in bank order (or the row order of the folder's own index.json), every file is hashed, and " +
        "an existing index.json is kept as index.orig.json. Afterwards every command treats the store as its own.\n\n" +
        "With --from vllm, the folder holds vLLM's hidden-state files (one .safetensors file per request, from " +
        "extract_hidden_states): a new store is written to --out, each row its query's last prompt token, " +
        "vLLM's layer id k stored as layer k-1 and id --num-layers recorded as taken before the final norm.",
    )
    .argument("<store>", "folder of L###.npy files (with --from vllm: the folder of .safetensors files)")
    .requiredOption("--bank <file>", "the query bank the store was made from")
    .option("--from <tool>", "what wrote the folder: npy or vllm", choiceOption("--from", ["npy", "vllm"]), "npy")
    .option("--model <name>", "model name to record (default: the foreign manifest's, else the folder's name)")
    .option("-j, --jobs <n>", "files hashed (or read) at once (default: the core count)", intOption("--jobs", 1))
    .option("--out <dir>", "with --from vllm: the store to write, a new folder")
    .option(
      "--requests <file>",
      "with --from vllm: JSONL mapping query_id to request_id, file or hidden_states_path " +
        "(default: QUERY_ID.safetensors)",
    )
    .option("--layer-ids <list>", "with --from vllm: the layer ids vLLM extracted, e.g. 8,16,24-28", layerIds)
    .option("--num-layers <n>", "with --from vllm: the model's decoder block count", intOption("--num-layers", 1))
    .action((store: string, opts: AdoptFlags) => (opts.from === "npy" ? adoptNpy(store, opts) : fromVllm(store, opts)));
}

async function adoptNpy(store: string, opts: AdoptFlags): Promise<void> {
  const given = VLLM_ONLY.find(([key]) => opts[key] !== undefined);
  if (given) throw new UsageError(`${given[1]} is for --from vllm; a folder of L###.npy files takes only --bank`);
  // A store whose manifest is already hsm's is left as it was: said so by its manifest's bytes, before and after.
  const manifest = join(store, "index.json");
  const before = await readFile(manifest).catch(() => undefined);
  const m = await adoptStore(store, { bank: opts.bank, model: opts.model, concurrency: opts.jobs });
  const after = await readFile(manifest).catch(() => undefined);
  const kept = before !== undefined && after !== undefined && before.equals(after);
  process.stdout.write(
    `${store}: ${kept ? "already an hsm store" : "adopted"} — ${m.query_ids.length} rows × ${m.d_model}, ` +
      `layers ${m.layers.join(", ")}; ${kept ? "index.json left as it was" : "index.json written"}\n`,
  );
}

async function fromVllm(store: string, opts: AdoptFlags): Promise<void> {
  const missing = VLLM_ONLY.find(([key]) => key !== "requests" && opts[key] === undefined);
  if (missing) throw new UsageError(`--from vllm needs ${missing[1]}`);
  const m = await adoptVllm(store, {
    bank: opts.bank,
    out: opts.out!,
    requests: opts.requests,
    layerIds: opts.layerIds!,
    numLayers: opts.numLayers!,
    model: opts.model,
    concurrency: opts.jobs,
  });
  process.stdout.write(
    `${opts.out}: adopted from ${store} — ${m.query_ids.length} rows × ${m.d_model} (${m.dtype}), ` +
      `layers ${m.layers.join(", ")} of ${m.num_layers}` +
      `${m.layers.at(-1) === m.num_layers - 1 ? " (the last before the final norm)" : ""}\n`,
  );
}
