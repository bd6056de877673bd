/**
 * The float64 references of the families with writers of their own
 * (src/synthetic/families.ts), by family: per block the residual stream at
 * the last position (the last after the final norm), and greedy decoding by
 * whole-sequence recomputation.
 */
import type { BloomConfig, BloomWeights, MptConfig, MptWeights } from "../../src/synthetic/alibi.js";
import { familyModel, type OwnFamily, type OwnFamilyOptions } from "../../src/synthetic/families.js";
import type {
  GptBigcodeConfig,
  GptBigcodeWeights,
  GptNeoConfig,
  GptNeoWeights,
} from "../../src/synthetic/gpt-relatives.js";
import type { CodegenConfig, CodegenWeights, GptjConfig, GptjWeights } from "../../src/synthetic/interleaved-rotary.js";
import type { Gpt2Config, Gpt2Weights, OptConfig, OptWeights } from "../../src/synthetic/learned-positions.js";
import type {
  MistralConfig,
  MistralWeights,
  MixtralConfig,
  MixtralWeights,
  OlmoConfig,
  OlmoWeights,
  Starcoder2Config,
  Starcoder2Weights,
} from "../../src/synthetic/llama-relatives.js";
import type {
  FalconConfig,
  FalconWeights,
  PhiConfig,
  PhiWeights,
  StablelmConfig,
  StablelmWeights,
} from "../../src/synthetic/partial-rotary.js";
import { referenceBloom, referenceMpt } from "./alibi-reference.js";
import { referenceGptBigcode, referenceGptNeo } from "./gpt-relatives-reference.js";
import { referenceCodegen, referenceGptj } from "./interleaved-rotary-reference.js";
import { referenceGpt2, referenceOpt } from "./learned-positions-reference.js";
import { referenceMistral, referenceMixtral, referenceOlmo, referenceStarcoder2 } from "./llama-relatives-reference.js";
import { referenceFalcon, referencePhi, referenceStablelm } from "./partial-rotary-reference.js";

type Forward = (ids: number[]) => { hidden: Float64Array[]; logits: Float64Array };

/**
 * The reference forward pass of the model `o` describes (`o.family` one of families.ts'). Every reference returns
 * per block the residual stream at the last position, the last block's after the final norm, as hsm stores it.
 */
export function ownFamilyForward(o: OwnFamilyOptions & { family: OwnFamily }): Forward {
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
    case "gptj":
      return (ids) => referenceGptj(config as GptjConfig, weights as GptjWeights, ids);
    case "codegen":
      return (ids) => referenceCodegen(config as CodegenConfig, weights as CodegenWeights, ids);
    case "gpt_neo":
      return (ids) => referenceGptNeo(config as GptNeoConfig, weights as GptNeoWeights, ids);
    case "gpt_bigcode":
      return (ids) => referenceGptBigcode(config as GptBigcodeConfig, weights as GptBigcodeWeights, ids);
    case "falcon":
      return (ids) => referenceFalcon(config as FalconConfig, weights as FalconWeights, ids);
    case "phi":
      return (ids) => referencePhi(config as PhiConfig, weights as PhiWeights, ids);
    case "stablelm":
      return (ids) => referenceStablelm(config as StablelmConfig, weights as StablelmWeights, ids);
    case "mistral":
      return (ids) => referenceMistral(config as MistralConfig, weights as MistralWeights, ids);
    case "mixtral":
      return (ids) => referenceMixtral(config as MixtralConfig, weights as MixtralWeights, ids);
    case "olmo":
      return (ids) => referenceOlmo(config as OlmoConfig, weights as OlmoWeights, ids);
    case "starcoder2":
      return (ids) => referenceStarcoder2(config as Starcoder2Config, weights as Starcoder2Weights, ids);
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
