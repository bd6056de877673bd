#!/usr/bin/env node
// The peer for `npm run bench:extract`: the same model run the straightforward
// way through onnxruntime-node — block outputs added as graph outputs, logits
// kept, batches in bank order — keeping the last position of each stored layer.
// Usage: node scripts/bench-extract-naive.mjs MODEL_DIR BANK BATCH_SIZE
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as ort from "onnxruntime-node";

const dist = join(dirname(fileURLToPath(import.meta.url)), "..", "dist");
const { mainForwardRows, readBank } = await import(join(dist, "bank", "bank.js"));
const { buildPrompt } = await import(join(dist, "bank", "prompt.js"));
const { openModelDir } = await import(join(dist, "model", "model-dir.js"));
const { PromptTokenizer } = await import(join(dist, "model", "tokenizer.js"));
const { decodeModel } = await import(join(dist, "onnx", "graph.js"));
const { detectHiddenTensors } = await import(join(dist, "model", "detect.js"));
const { addHiddenOutputs } = await import(join(dist, "onnx", "rewrite.js"));
const { leftPad } = await import(join(dist, "model", "batching.js"));
const { selectLayers } = await import(join(dist, "store", "layers.js"));
const { f32ToF16 } = await import(join(dist, "kernels", "typescript", "float16.js"));

const [modelDir, bankPath, batchArg] = process.argv.slice(2);
const batchSize = Number(batchArg ?? 16);
const t0 = performance.now();
const rows = mainForwardRows(await readBank(bankPath));
const md = await openModelDir(modelDir);
const tokenizer = await PromptTokenizer.load(modelDir);
const model = decodeModel(await readFile(md.onnxPath));
const plan = detectHiddenTensors(model.graph, md.config.numLayers);
const layers = selectLayers(md.config.numLayers);
const tensors = layers.map((l) => plan.tensors.find((t) => t.layer === l));
const session = await ort.InferenceSession.create(addHiddenOutputs(model, tensors), { logSeverityLevel: 3 });
const d = md.config.hiddenSize;
const stored = layers.map(() => new Uint16Array(rows.length * d));
for (let start = 0; start < rows.length; start += batchSize) {
  const batch = rows.slice(start, start + batchSize).map((r) => tokenizer.encode(buildPrompt(r)));
  const f = leftPad(batch, tokenizer.padId);
  const out = await session.run({
    input_ids: new ort.Tensor("int64", f.inputIds, [f.batch, f.length]),
    attention_mask: new ort.Tensor("int64", f.attentionMask, [f.batch, f.length]),
    position_ids: new ort.Tensor("int64", f.positionIds, [f.batch, f.length]),
  });
  tensors.forEach((t, k) => {
    const data = out[t.tensor].data;
    for (let b = 0; b < f.batch; b++) {
      const last = data.subarray(((b + 1) * f.length - 1) * d, (b + 1) * f.length * d);
      f32ToF16(last, stored[k].subarray((start + b) * d, (start + b + 1) * d));
    }
  });
}
const seconds = (performance.now() - t0) / 1000;
console.log(
  JSON.stringify({
    rows: rows.length,
    seconds,
    rows_per_s: rows.length / seconds,
    max_rss_kb: process.resourceUsage().maxRSS,
  }),
);
