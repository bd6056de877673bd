/**
 * The families whose graphs are not Llama-shaped, written by builders of
 * their own (learned-positions.ts: `gpt2`, `opt`; alibi.ts: `bloom`, `mpt`),
 * in the optimum outputs a user meets: `model.onnx` without or with past
 * (`plain`, `with-past`), the legacy `decoder_model.onnx` (no `position_ids`
 * input: `--no-position-ids`), the merged decoder (`merged`), and the renamed
 * graphs (`dynamo-names`, `anonymous`). config.json carries each family's own
 * field names.
 */
import { UsageError } from "../errors.js";
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
  externalizeWeights,
  tinyConfig,
  writeModelFolder,
  type Family,
  type GraphVariant,
  type LlamaConfig,
  type LlamaFamily,
  type TinyModelOptions,
} from "./llama.js";
import { mergeDecoders } from "./merged.js";
import { renameModelFile } from "./rename.js";

export type OwnFamily = Exclude<Family, LlamaFamily>;

/** What writing one family takes: its config from the options, seeded weights, the graph and config.json. */
interface FamilyWriter<C, W> {
  config(o: TinyModelOptions): C;
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
};

/** The styles these families are written in. */
const OWN_FAMILY_STYLES = ["plain", "with-past", "merged", "dynamo-names", "anonymous"] as const;

/** Whether `family` has a writer here rather than in llama.ts. */
export function isOwnFamily(family: Family | undefined): family is OwnFamily {
  return family !== undefined && family in WRITERS;
}

/** The family's config and weights for these options (the tests' references take them). */
export function familyModel(o: TinyModelOptions & { family: OwnFamily }): { config: unknown; weights: unknown } {
  const w = WRITERS[o.family];
  const config = w.config(o);
  return { config, weights: w.weights(config, o.seed ?? 1234, o.embedScale ?? 1) };
}

/**
 * Writes the model folder of `o.family` in `style`; returns its geometry in Llama's field names (every head
 * its own key and value head) for what `make-model` prints.
 */
export async function writeFamilyModel(
  dir: string,
  style: string,
  o: TinyModelOptions & { family: OwnFamily },
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
  return tinyConfig({ ...o, family: undefined, kvHeads: o.heads });
}
