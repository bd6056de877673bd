/**
 * The families whose graphs are not Llama-shaped, written by builders of
 * their own (learned-positions.ts: `gpt2`, `opt`; alibi.ts: `bloom`, `mpt`;
 * interleaved-rotary.ts: `gptj`, `codegen`; gpt-relatives.ts: `gpt_neo`,
 * `gpt_bigcode`; partial-rotary.ts: `falcon`, `phi`, `stablelm`;
 * llama-relatives.ts: `mistral`, `mixtral`, `olmo`, `starcoder2`), in the optimum outputs a user meets: `model.onnx` without or with past
 * (`plain`, `with-past`), the legacy `decoder_model.onnx` (no `position_ids`
 * input: `--no-position-ids`), the merged decoder (`merged`), and the renamed
 * graphs (`dynamo-names`, `anonymous`). config.json carries each family's own
 * field names.
 */
import { UsageError } from "../errors.js";
import { attentionShape } from "../onnx/add-cache.js";
import { decodeModel, encodeModel } from "../onnx/graph.js";
import {
  bloomConfig,
  bloomConfigJson,
  bloomWeights,
  buildBloomOnnx,
  buildMptOnnx,
  mptConfig,
  mptConfigJson,
  mptWeights,
} from "./alibi.js";
import {
  buildGptBigcodeOnnx,
  buildGptNeoOnnx,
  gptBigcodeConfig,
  gptBigcodeConfigJson,
  gptBigcodeWeights,
  gptNeoConfig,
  gptNeoConfigJson,
  gptNeoWeights,
} from "./gpt-relatives.js";
import {
  buildCodegenOnnx,
  buildGptjOnnx,
  codegenConfig,
  codegenConfigJson,
  codegenWeights,
  gptjConfig,
  gptjConfigJson,
  gptjWeights,
} from "./interleaved-rotary.js";
import {
  buildGpt2Onnx,
  buildOptOnnx,
  gpt2Config,
  gpt2ConfigJson,
  gpt2Weights,
  optConfig,
  optConfigJson,
  optWeights,
} from "./learned-positions.js";
import {
  buildMistralOnnx,
  buildMixtralOnnx,
  buildOlmoOnnx,
  buildStarcoder2Onnx,
  mistralConfig,
  mistralConfigJson,
  mistralWeights,
  mixtralConfig,
  mixtralConfigJson,
  mixtralWeights,
  olmoConfig,
  olmoConfigJson,
  olmoWeights,
  starcoder2Config,
  starcoder2ConfigJson,
  starcoder2Weights,
  type LlamaRelativeOptions,
} from "./llama-relatives.js";
import {
  externalizeWeights,
  tinyConfig,
  writeModelFolder,
  type Family,
  type GraphVariant,
  type LlamaConfig,
  type LlamaFamily,
} from "./llama.js";
import { mergeDecoders } from "./merged.js";
import {
  buildFalconOnnx,
  buildPhiOnnx,
  buildStablelmOnnx,
  falconConfig,
  falconConfigJson,
  falconWeights,
  phiConfig,
  phiConfigJson,
  phiWeights,
  stablelmConfig,
  stablelmConfigJson,
  stablelmWeights,
} from "./partial-rotary.js";
import { renameModelFile } from "./rename.js";

export type OwnFamily = Exclude<Family, LlamaFamily>;

/**
 * The tiny-model options and the knobs of some families: `slidingWindow` (Mistral's, Mixtral's and StarCoder2's
 * `sliding_window`, GPT-Neo's local `window_size`), `clipQkv` (OLMo), the experts (Mixtral) and `multiQuery`
 * (GPT-BigCode; true by default).
 */
export interface OwnFamilyOptions extends LlamaRelativeOptions {
  multiQuery?: boolean;
}

/** What writing one family takes: its config from the options, seeded weights, the graph and config.json. */
interface FamilyWriter<C, W> {
  config(o: OwnFamilyOptions): C;
  weights(c: C, seed: number, embedScale: number): W;
  build(c: C, w: W, withPast: boolean, variant: GraphVariant): Uint8Array;
  configJson(c: C, withPast: boolean): string;
}

const writer = <C, W>(w: FamilyWriter<C, W>) => w as FamilyWriter<unknown, unknown>;

const WRITERS: Record<OwnFamily, FamilyWriter<unknown, unknown>> = {
  gpt2: writer({ config: gpt2Config, weights: gpt2Weights, build: buildGpt2Onnx, configJson: gpt2ConfigJson }),
  opt: writer({ config: optConfig, weights: optWeights, build: buildOptOnnx, configJson: optConfigJson }),
  bloom: writer({ config: bloomConfig, weights: bloomWeights, build: buildBloomOnnx, configJson: bloomConfigJson }),
  mpt: writer({ config: mptConfig, weights: mptWeights, build: buildMptOnnx, configJson: mptConfigJson }),
  gptj: writer({ config: gptjConfig, weights: gptjWeights, build: buildGptjOnnx, configJson: gptjConfigJson }),
  codegen: writer({
    config: codegenConfig,
    weights: codegenWeights,
    build: buildCodegenOnnx,
    configJson: codegenConfigJson,
  }),
  gpt_neo: writer({
    config: (o) => gptNeoConfig(o, o.slidingWindow ?? undefined),
    weights: gptNeoWeights,
    build: buildGptNeoOnnx,
    configJson: gptNeoConfigJson,
  }),
  gpt_bigcode: writer({
    config: (o) => gptBigcodeConfig(o, o.multiQuery ?? true),
    weights: gptBigcodeWeights,
    build: buildGptBigcodeOnnx,
    configJson: gptBigcodeConfigJson,
  }),
  falcon: writer({
    config: falconConfig,
    weights: falconWeights,
    build: buildFalconOnnx,
    configJson: falconConfigJson,
  }),
  phi: writer({ config: (o) => phiConfig(o), weights: phiWeights, build: buildPhiOnnx, configJson: phiConfigJson }),
  stablelm: writer({
    config: (o) => stablelmConfig(o),
    weights: stablelmWeights,
    build: buildStablelmOnnx,
    configJson: stablelmConfigJson,
  }),
  mistral: writer({
    config: mistralConfig,
    weights: mistralWeights,
    build: buildMistralOnnx,
    configJson: mistralConfigJson,
  }),
  mixtral: writer({
    config: mixtralConfig,
    weights: mixtralWeights,
    build: buildMixtralOnnx,
    configJson: mixtralConfigJson,
  }),
  olmo: writer({ config: olmoConfig, weights: olmoWeights, build: buildOlmoOnnx, configJson: olmoConfigJson }),
  starcoder2: writer({
    config: starcoder2Config,
    weights: starcoder2Weights,
    build: buildStarcoder2Onnx,
    configJson: starcoder2ConfigJson,
  }),
};

/** The styles these families are written in. */
const OWN_FAMILY_STYLES = ["plain", "with-past", "merged", "dynamo-names", "anonymous"] as const;

/** Whether `family` has a writer here rather than in llama.ts. */
export function isOwnFamily(family: Family | undefined): family is OwnFamily {
  return family !== undefined && family in WRITERS;
}

/** The family's config and weights for these options (the tests' references take them). */
export function familyModel(o: OwnFamilyOptions & { family: OwnFamily }): { config: unknown; weights: unknown } {
  const w = WRITERS[o.family];
  const config = w.config(o);
  return { config, weights: w.weights(config, o.seed ?? 1234, o.embedScale ?? 1) };
}

/**
 * Writes the model folder of `o.family` in `style`; returns its geometry in Llama's field names (the key/value
 * heads its config.json implies) for what `make-model` prints.
 */
export async function writeFamilyModel(
  dir: string,
  style: string,
  o: OwnFamilyOptions & { family: OwnFamily },
): Promise<LlamaConfig> {
  if (!(OWN_FAMILY_STYLES as readonly string[]).includes(style))
    throw new UsageError(
      `Expected --style ${OWN_FAMILY_STYLES.join(", ")} with --family ${o.family} but received "${style}"`,
    );
  const w = WRITERS[o.family];
  const { config, weights } = familyModel(o);
  const withPast = style === "with-past" || (o.withPast ?? false);
  const variant: GraphVariant = { positionIds: o.positionIds };
  const graph =
    style === "merged"
      ? mergeDecoders(
          w.build(config, weights, true, variant),
          w.build(config, weights, false, { ...variant, present: true }),
        )
      : w.build(config, weights, withPast, variant);
  const files: Record<string, Uint8Array | string> = {
    "model.onnx": graph,
    "config.json": w.configJson(config, withPast || style === "merged"),
  };
  if (o.externalData) {
    const model = decodeModel(graph);
    Object.assign(files, externalizeWeights(model, "model.onnx_data"));
    files["model.onnx"] = encodeModel(model);
  }
  await writeModelFolder(dir, o.tokenizer ?? "llama3.1", files);
  if (style === "dynamo-names" || style === "anonymous") await renameModelFile(dir, style, o.seed ?? 1);
  const kvHeads = attentionShape(JSON.parse(files["config.json"] as string))?.kvHeads ?? o.heads;
  return tinyConfig({ ...o, family: undefined, kvHeads });
}
