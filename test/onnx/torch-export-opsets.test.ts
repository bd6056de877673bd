/**
 * Hidden states of torch.onnx.export graphs of the LayerNorm families at
 * opset 17 (one `LayerNormalization` per norm) and opset 14 (each norm written
 * out: `ReduceMean`, `Sub`, `Pow`, `Sqrt`, `Div`, `Mul`, `Add`), from the
 * modules of test/helpers/torch_export.py, whose blocks add a projection's
 * bias after the residual (`x + a @ W + b`). The opset-17 store is checked
 * against onnxruntime run on the unmodified graph with two of its tensors
 * added as outputs: the input of the norm that opens block 1 (block 0's
 * output) and the output of the last norm (the final norm, the LM head's
 * input). The opset-14 store must hold the same states. Skipped where PyTorch
 * is not installed, unless HSM_REQUIRE_TORCH=1 (as in CI), where that fails.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract } from "../../src/extract/extract.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { DataType, encodeModel, loadModel, valueInfo } from "../../src/onnx/graph.js";
import { StoreReader } from "../../src/store/reader.js";
import { tempDir } from "../helpers/tmp.js";
import { anchorRows, exportTorchModel, hasTorch } from "../helpers/torch-export.js";

const dir = tempDir("hsm-torch-opsets-");
const bank = join(dir, "bank.jsonl");
const rows = anchorRows(["What is the capital of France?", "Ok?", "Who wrote Don Quixote?"]);
/**
 * The families, with the index (in node order, at opset 17) of the `LayerNormalization` that opens block 1:
 * two norms per pre-norm block, one per parallel block on one norm (Falcon, Phi), two reading the same stream in
 * NeoX's parallel block, BLOOM's embedding norm first.
 */
const FAMILIES = {
  gpt2: { seed: 8, kvHeads: undefined, opensBlock1: 2 },
  bloom: { seed: 10, kvHeads: undefined, opensBlock1: 3 },
  opt: { seed: 11, kvHeads: undefined, opensBlock1: 2 },
  neox: { seed: 12, kvHeads: 4, opensBlock1: 2 },
  falcon: { seed: 14, kvHeads: undefined, opensBlock1: 1 },
  phi: { seed: 23, kvHeads: undefined, opensBlock1: 1 },
  gpt_neo: { seed: 26, kvHeads: undefined, opensBlock1: 2 },
} as const;

/** onnxruntime's float32 values of `tensors` at each prompt's last token, the graph run at batch 1. */
async function lastTokenStates(md: string, tensors: string[], prompts: number[][]): Promise<Float32Array[][]> {
  const model = await loadModel(join(md, "model.onnx"));
  model.graph!.output!.push(...tensors.map((t) => valueInfo(t, DataType.FLOAT, [])));
  // Dims unknown: drop the empty shape so onnxruntime infers it.
  for (const o of model.graph!.output!.slice(-tensors.length)) delete o.type!.tensorType!.shape;
  const session = await ort.InferenceSession.create(encodeModel(model));
  const out: Float32Array[][] = [];
  for (const ids of prompts) {
    const T = ids.length;
    const feeds: Record<string, ort.Tensor> = {};
    const int64 = (v: number[]) => new ort.Tensor("int64", BigInt64Array.from(v.map(BigInt)), [1, T]);
    for (const name of session.inputNames) {
      if (name === "input_ids") feeds[name] = int64(ids);
      else if (name === "attention_mask") feeds[name] = int64(ids.map(() => 1));
      else if (name === "position_ids") feeds[name] = int64(ids.map((_, i) => i));
    }
    const res = await session.run(feeds, tensors);
    out.push(
      tensors.map((t) => {
        const data = res[t]!.data as Float32Array;
        const d = res[t]!.dims.at(-1)!;
        return data.slice(data.length - d);
      }),
    );
  }
  await session.release();
  return out;
}

/** The worst error of a store against float32 values, in units of float16 rounding (2^-10 relative) plus float32 noise. */
async function worstError(store: string, want: (row: number, layer: number) => Float32Array): Promise<number> {
  const reader = await StoreReader.open(store);
  let worst = 0;
  for (const layer of reader.manifest.layers) {
    for (let i = 0; i < rows.length; i++) {
      const got = await reader.readRowsF32(layer, i, 1);
      want(i, layer).forEach((w, j) => {
        worst = Math.max(worst, Math.abs(got[j]! - w) / (Math.abs(w) * 2 ** -10 + 2e-3));
      });
    }
  }
  await reader.close();
  return worst;
}

beforeAll(() => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
});

describe.skipIf(!hasTorch)("a torch.onnx.export graph of a LayerNorm family, at opset 17 and 14", () => {
  it.each(Object.keys(FAMILIES) as (keyof typeof FAMILIES)[])(
    "%s: block 0's output (biases included) and the final norm's output, as onnxruntime computes them",
    async (family) => {
      const f = FAMILIES[family];
      const md17 = join(dir, `${family}-17`);
      const md14 = join(dir, `${family}-14`);
      const module = { module: family, family, kvHeads: f.kvHeads, seed: f.seed };
      await exportTorchModel(md17, module, 2, 17);
      await exportTorchModel(md14, module, 2, 14);

      const graph = (await loadModel(join(md17, "model.onnx"))).graph!;
      const norms = graph.node!.filter((n) => n.opType === "LayerNormalization");
      const block0 = norms[f.opensBlock1]!.input![0]!;
      const final = norms.at(-1)!.output![0]!;
      const tok = await PromptTokenizer.load(md17);
      const prompts = rows.map((r) => tok.encode(buildPrompt(r)));
      const want = await lastTokenStates(md17, [block0, final], prompts);

      const stores = { 17: join(dir, `${family}-17.store`), 14: join(dir, `${family}-14.store`) };
      for (const [opset, md] of [
        [17, md17],
        [14, md14],
      ] as const) {
        await extract({ modelDir: md, bank, out: stores[opset], batchSize: 1, layerRule: "l >= 0" });
        expect(await worstError(stores[opset], (i, layer) => want[i]![layer]!)).toBeLessThanOrEqual(1);
      }
    },
  );
});
