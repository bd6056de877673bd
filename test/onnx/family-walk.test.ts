/**
 * docs/contributing.md's model family, run as the page writes it: its module
 * (a ```python block for test/helpers/torch_export.py) added to a copy of that
 * file, exported by torch.onnx.export into a folder whose config.json names the
 * sizes as the family does, then read as step 1 reads a new family (the style
 * and the names' cross-check in the store's index.json) and checked as the
 * test tables check every family: each block's stored state against the float64
 * module's, and the greedy text through an added cache at batch 8 and 1.
 * Skipped where PyTorch is not installed, unless HSM_REQUIRE_TORCH=1 (as in
 * CI), where that fails.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract } from "../../src/extract/extract.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { tempDir } from "../helpers/tmp.js";
import {
  anchorRows,
  expectModuleGreedy,
  exportTorchModel,
  hasTorch,
  torchExportWith,
  worstAgainstStates,
  type TorchModule,
} from "../helpers/torch-export.js";
import { walkScript } from "../helpers/walks.js";

const dir = tempDir("hsm-family-walk-");
const bank = join(dir, "bank.jsonl");
const rows = anchorRows([
  "What is the capital of France?",
  "Ok?",
  "Who wrote Don Quixote?",
  "Name the largest planet.",
]);
const LAYERS = 3;
const MAX_NEW = 8;
const EOS = 1025;

describe.skipIf(!hasTorch)("the model family of docs/contributing.md", () => {
  const script = hasTorch ? walkScript("test/helpers/torch_export.py") : "";
  const md = join(dir, "sandwich");
  // The walk's TORCH_CONFIGS entry: Llama's folder, its sizes under GPT-2's names and Llama's own names dropped.
  const model: TorchModule = {
    module: "sandwich",
    family: "llama",
    kvHeads: 2,
    seed: 33,
    script,
    config: {
      architectures: ["SandwichForCausalLM"],
      model_type: "sandwich",
      n_layer: LAYERS,
      n_embd: 32,
      n_head: 4,
      num_hidden_layers: undefined,
      hidden_size: undefined,
      num_attention_heads: undefined,
    },
  };
  let ids = "";

  beforeAll(async () => {
    writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    await exportTorchModel(md, model, LAYERS);
    const tok = await PromptTokenizer.load(md);
    ids = join(dir, "ids.json");
    writeFileSync(ids, JSON.stringify(rows.map((r) => tok.encode(buildPrompt(r)))));
  });

  it("is found by structure, under the family's config.json names, and stores the float64 module's states", async () => {
    expect(JSON.parse(readFileSync(join(md, "config.json"), "utf8"))).toEqual(
      expect.not.objectContaining({ num_hidden_layers: expect.anything() }),
    );
    const want = JSON.parse(torchExportWith(script, "states", "sandwich", md, "33", ids)) as number[][][];
    const store = join(dir, "sandwich.store");
    await extract({ modelDir: md, bank, out: store, batchSize: 2, layerRule: "l >= 0" });
    const reader = await StoreReader.open(store);
    expect(reader.manifest.layers).toEqual([0, 1, 2]);
    // Two residual Adds a block, the post-norms inside its branches; no torch names in a module without submodules.
    expect(reader.manifest.style?.name).toBe("structural");
    expect(reader.manifest.style?.cross_check).toBe("names: none to check against (graph style seen: anonymous)");
    expect(reader.manifest.style?.layers.map((l) => l.how)).toEqual([
      expect.stringMatching(/^structure: residual Add 2 of 6, the end of block 0\b/),
      expect.stringMatching(/^structure: residual Add 4 of 6, the end of block 1\b/),
      expect.stringMatching(/^structure: final norm output between the last residual and the LM head\b/),
    ]);
    const worst = await worstAgainstStates(reader, want);
    await reader.close();
    expect(worst).toBeLessThanOrEqual(1);
  });

  it("writes the float64 module's greedy text through an added cache at batch 8 and 1", async () => {
    const tok = await PromptTokenizer.load(md);
    const greedy = JSON.parse(
      torchExportWith(script, "greedy", "sandwich", md, "33", ids, String(MAX_NEW), String(EOS)),
    ) as number[][];
    await expectModuleGreedy(md, bank, join(dir, "sandwich"), tok, greedy, EOS, MAX_NEW);
  });
});
