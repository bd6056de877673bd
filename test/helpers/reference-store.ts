/**
 * A store against the float64 reference forward pass of the tiny model it was
 * extracted from: every stored row and layer within STORED_VS_REFERENCE
 * (float16 rounding plus float32 noise). For a quantized or float16 style of
 * the Llama shape, the reference runs on the weights that style's graph
 * multiplies by (styleWeights).
 */
import { readFileSync } from "node:fs";

import { expect } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { tinyConfig, tinyWeights } from "../../src/synthetic/llama.js";
import { styleWeights, type QuantizedStyle } from "../../src/synthetic/quantize.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { isOwnFamily, type OwnFamilyOptions } from "../../src/synthetic/families.js";
import { referenceHiddenFamily } from "./family-reference.js";
import { ownFamilyForward } from "./own-family-reference.js";
import { STORED_VS_REFERENCE } from "../tolerances.js";
import { referenceHidden } from "./llama-reference.js";

/** The references already computed, by model (its options but `positionIds`) and then by prompt. */
const computed = new Map<string, Map<string, Float64Array[]>>();

/**
 * The reference forward pass of the model `o` describes: per block, the residual stream at the last position.
 * Whether the graph reads `position_ids` changes neither its weights nor an unpadded sequence's positions, so the
 * outputs of one model share their results (the float64 passes cost more than the runs they check).
 */
function referenceOf(o: OwnFamilyOptions, weightsOf?: QuantizedStyle): (ids: number[]) => Float64Array[] {
  const key = JSON.stringify({ ...o, positionIds: undefined, weightsOf });
  if (!computed.has(key)) computed.set(key, new Map());
  const known = computed.get(key)!;
  let forward: ((ids: number[]) => Float64Array[]) | undefined;
  return (ids) => {
    const k = ids.join(",");
    if (!known.has(k)) known.set(k, (forward ??= forwardOf(o, weightsOf))(ids));
    return known.get(k)!;
  };
}

function forwardOf(o: OwnFamilyOptions, weightsOf?: QuantizedStyle): (ids: number[]) => Float64Array[] {
  if (isOwnFamily(o.family)) {
    if (weightsOf !== undefined) throw new Error(`the ${o.family} reference runs on its float32 weights only`);
    const forward = ownFamilyForward({ ...o, family: o.family });
    return (ids) => forward(ids).hidden;
  }
  const config = tinyConfig(o);
  const weights = weightsOf === undefined ? tinyWeights(o) : styleWeights(weightsOf, tinyWeights(o));
  return weights.family
    ? (ids) => referenceHiddenFamily(config, weights, ids)
    : (ids) => referenceHidden(config, weights, ids);
}

export async function expectStoreMatchesReference(
  store: string,
  o: OwnFamilyOptions,
  modelDir: string,
  bankPath: string,
  weightsOf?: QuantizedStyle,
): Promise<void> {
  const reference = referenceOf(o, weightsOf);
  const tok = await PromptTokenizer.load(modelDir);
  const rows = readFileSync(bankPath, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .filter((r) => r.use_for_main_forward);
  const reader = await StoreReader.open(store);
  let worst = 0;
  for (const [i, row] of rows.entries()) {
    const ids = tok.encode(buildPrompt(row));
    const ref = reference(ids);
    for (const layer of reader.manifest.layers) {
      const got = await reader.readRowsF32(layer, i, 1);
      ref[layer]!.forEach(
        (want, j) =>
          (worst = Math.max(
            worst,
            Math.abs(got[j]! - want) / (Math.abs(want) * STORED_VS_REFERENCE.relative + STORED_VS_REFERENCE.absolute),
          )),
      );
    }
  }
  await reader.close();
  expect(worst).toBeLessThanOrEqual(1);
}
