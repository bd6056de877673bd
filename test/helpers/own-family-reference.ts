/**
 * The float64 references of the families with writers of their own
 * (src/synthetic/families.ts), by family: per block the residual stream at
 * the last position (the last after the final norm), and greedy decoding by
 * whole-sequence recomputation.
 */
import type { BloomConfig, BloomWeights, MptConfig, MptWeights } from "../../src/synthetic/alibi.js";
import { familyModel, type OwnFamily } from "../../src/synthetic/families.js";
import type { Gpt2Config, Gpt2Weights, OptConfig, OptWeights } from "../../src/synthetic/learned-positions.js";
import type { TinyModelOptions } from "../../src/synthetic/llama.js";
import { referenceBloom, referenceMpt } from "./alibi-reference.js";
import { referenceGpt2, referenceOpt } from "./learned-positions-reference.js";

type Forward = (ids: number[]) => { hidden: Float64Array[]; logits: Float64Array };

/** The reference forward pass of the model `o` describes (`o.family` one of families.ts'). */
export function ownFamilyForward(o: TinyModelOptions & { family: OwnFamily }): Forward {
  const { config, weights } = familyModel(o);
  switch (o.family) {
    case "gpt2":
      return (ids) => referenceGpt2(config as Gpt2Config, weights as Gpt2Weights, ids);
    case "opt":
      return (ids) => referenceOpt(config as OptConfig, weights as OptWeights, ids);
    case "bloom":
      return (ids) => referenceBloom(config as BloomConfig, weights as BloomWeights, ids);
    case "mpt":
      return (ids) => referenceMpt(config as MptConfig, weights as MptWeights, ids);
  }
}

/** Greedy decoding over the reference: the argmax of the last position's logits, until an EOS or `maxNew` tokens. */
export function ownFamilyGreedy(
  forward: Forward,
  prompt: number[],
  eos: ReadonlySet<number>,
  maxNew: number,
): number[] {
  const out: number[] = [];
  while (out.length < maxNew) {
    const { logits } = forward([...prompt, ...out]);
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    out.push(best);
    if (eos.has(best)) break;
  }
  return out;
}
