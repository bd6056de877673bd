/**
 * Hidden states of torch.onnx.export graphs whose blocks are not Llama's two
 * pre-norm residuals, from the modules of test/helpers/torch_export.py: OLMo 2
 * (norms after attention and after the MLP, before their residual Adds, and
 * none before), Granite (each branch scaled by a `Mul` before its Add, the
 * embeddings scaled by another), Cohere (a parallel block on one LayerNorm
 * written out), Qwen3 and Gemma 3 (an RMSNorm on each head's queries and keys,
 * heads wider than hidden/heads; Gemma 3's four norms a block and its local and
 * global layers), with Llama as the control. The store must hold the float64
 * module's states: each block's output, the last after the final norm.
 * Skipped where PyTorch is not installed, unless HSM_REQUIRE_TORCH=1 (as in
 * CI), where that fails.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract } from "../../src/extract/extract.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { tempDir } from "../helpers/tmp.js";
import { anchorRows, exportTorchModel, hasTorch, torchExport, worstAgainstStates } from "../helpers/torch-export.js";

const dir = tempDir("hsm-torch-blocks-");
const bank = join(dir, "bank.jsonl");
const rows = anchorRows(["What is the capital of France?", "Ok?", "Who wrote Don Quixote?"]);
/** Each module's seed, and the make-model family whose folder (tokenizer, sizes, config.json) it starts from. */
const FAMILIES = {
  llama: { seed: 7, base: "llama" },
  olmo2: { seed: 28, base: "llama" },
  granite: { seed: 29, base: "llama" },
  cohere: { seed: 30, base: "llama" },
  qwen3: { seed: 31, base: "qwen2" },
  gemma3_text: { seed: 32, base: "gemma" },
} as const;

beforeAll(() => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
});

describe.skipIf(!hasTorch)(
  "a torch.onnx.export graph with post-norms, multipliers, a parallel block or q/k norms",
  () => {
    it.each(Object.keys(FAMILIES) as (keyof typeof FAMILIES)[])(
      "%s: every block's stored state is the float64 module's, within float16 rounding",
      async (family) => {
        const md = join(dir, family);
        const { seed, base } = FAMILIES[family];
        await exportTorchModel(md, { module: family, family: base, kvHeads: 2, seed }, 3);
        const tok = await PromptTokenizer.load(md);
        const ids = join(dir, `${family}.ids.json`);
        writeFileSync(ids, JSON.stringify(rows.map((r) => tok.encode(buildPrompt(r)))));
        const want = JSON.parse(torchExport("states", family, md, String(seed), ids)) as number[][][];

        const store = join(dir, `${family}.store`);
        await extract({ modelDir: md, bank, out: store, batchSize: 2, layerRule: "l >= 0" });
        const reader = await StoreReader.open(store);
        expect(reader.manifest.layers).toEqual([0, 1, 2]);
        const worst = await worstAgainstStates(reader, want);
        await reader.close();
        expect(worst).toBeLessThanOrEqual(1);
      },
    );
  },
);
