/**
 * optimum's merged decoder (`decoder_model_merged.onnx`): one `If` node,
 * `optimum::if`, on a last input `use_cache_branch` (BOOL [1]). Its
 * `then_branch` is the with-past decoder, its `else_branch` the decoder
 * without past; the layer nodes exist only inside the branches, under the same
 * names in both, and the initializers both branches share are hoisted to the
 * main graph renamed `<name>_merged_<n>`, as optimum's merge does.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { DataType, decodeModel, encodeModel, valueInfo, type GraphProto, type TensorProto } from "../onnx/graph.js";
import {
  buildLlamaOnnx,
  externalizeWeights,
  tinyConfig,
  tinyWeights,
  writeTinyModel,
  type LlamaConfig,
  type LlamaWeights,
  type TinyModelOptions,
} from "./llama.js";

export const MERGED_IF = "optimum::if";
export const USE_CACHE_BRANCH = "use_cache_branch";

function sameTensor(a: TensorProto, b: TensorProto): boolean {
  const x = a.rawData;
  const y = b.rawData;
  if (!x || !y || x.length !== y.length || a.dataType !== b.dataType || (a.dims ?? []).join() !== (b.dims ?? []).join())
    return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

function renameInputs(graph: GraphProto, from: string, to: string): void {
  for (const n of graph.node ?? []) n.input = (n.input ?? []).map((i) => (i === from ? to : i));
}

/** The merged graph of the model: with-past and no-past decoders as the branches of one If. */
function buildMergedOnnx(c: LlamaConfig, w: LlamaWeights, positionIds = true): Uint8Array {
  return mergeDecoders(
    buildLlamaOnnx(c, w, true, { positionIds }),
    buildLlamaOnnx(c, w, false, { positionIds, present: true }),
  );
}

/** Merges a with-past decoder and a no-past one that outputs `present.*` (encoded graphs) as optimum does. */
export function mergeDecoders(withPastBytes: Uint8Array, noPastBytes: Uint8Array): Uint8Array {
  const withPast = decodeModel(withPastBytes).graph!;
  const noPast = decodeModel(noPastBytes).graph!;
  const elseInit = new Map((noPast.initializer ?? []).map((t) => [t.name!, t]));
  const hoisted: TensorProto[] = [];
  const thenInit: TensorProto[] = [];
  for (const t of withPast.initializer ?? []) {
    const twin = elseInit.get(t.name!);
    if (!twin || !sameTensor(t, twin)) {
      thenInit.push(t);
      continue;
    }
    const name = `${t.name}_merged_${hoisted.length}`;
    renameInputs(withPast, t.name!, name);
    renameInputs(noPast, t.name!, name);
    elseInit.delete(t.name!);
    hoisted.push({ ...t, name });
  }
  const branch = (g: GraphProto, name: string, init: TensorProto[]): GraphProto => ({
    name,
    node: g.node,
    initializer: init,
    output: g.output,
  });
  const inputs = [...(withPast.input ?? []), valueInfo(USE_CACHE_BRANCH, DataType.BOOL, [1])];
  return encodeModel({
    irVersion: 8,
    producerName: "hsm tiny-llama (optimum merged)",
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "merged_decoder",
      node: [
        {
          name: MERGED_IF,
          opType: "If",
          input: [USE_CACHE_BRANCH],
          output: (withPast.output ?? []).map((o) => o.name!),
          attribute: [
            { name: "then_branch", type: 5, g: branch(withPast, "decoder_with_past", thenInit) },
            { name: "else_branch", type: 5, g: branch(noPast, "decoder", [...elseInit.values()]) },
          ],
        },
      ],
      initializer: hoisted,
      input: inputs,
      output: withPast.output,
    },
  });
}

/**
 * Writes a model folder whose `model.onnx` is the merged decoder of the tiny
 * model (weights in `model.onnx_data` with `externalData`).
 */
export async function writeMergedModel(dir: string, o: TinyModelOptions = {}): Promise<LlamaConfig> {
  const config = await writeTinyModel(dir, { ...o, withPast: true, externalData: false });
  const merged = buildMergedOnnx(config, tinyWeights(o), o.positionIds ?? true);
  if (o.externalData) {
    const model = decodeModel(merged);
    const data = externalizeWeights(model, "model.onnx_data");
    await writeFile(join(dir, "model.onnx"), encodeModel(model));
    for (const [name, bytes] of Object.entries(data)) await writeFile(join(dir, name), bytes);
  } else await writeFile(join(dir, "model.onnx"), merged);
  return tinyConfig(o);
}
