/**
 * The export styles `hsm make-model --style` writes from the tiny model's
 * seeded weights, beside the plain optimum graph: the with-past graph, the
 * merged decoder, the renamed graphs whose names say nothing, the
 * onnxruntime-genai builds (genai.ts: fp32, fp16, int4) and the
 * transformers.js quantized and float16 files (quantize.ts). The optimum
 * styles may take another family's graph shape (`--family`), external
 * weights and no `position_ids` input.
 */
import { UsageError } from "../errors.js";
import { isOwnFamily, writeFamilyModel } from "./families.js";
import { genaiFiles, type GenaiPrecision } from "./genai.js";
import { FAMILIES, writeTinyModel, type Family, type LlamaConfig, type TinyModelOptions } from "./llama.js";
import { writeMergedModel } from "./merged.js";
import { QUANTIZED_STYLES, quantizedFiles, type QuantizedStyle } from "./quantize.js";
import { renameModelFile } from "./rename.js";

const GENAI_STYLES = { genai: "fp32", "genai-fp16": "fp16", "genai-int4": "int4" } as const satisfies Record<
  string,
  GenaiPrecision
>;

export const MODEL_STYLES = [
  "plain",
  "with-past",
  "merged",
  "dynamo-names",
  "anonymous",
  ...(Object.keys(GENAI_STYLES) as (keyof typeof GENAI_STYLES)[]),
  ...(Object.keys(QUANTIZED_STYLES) as QuantizedStyle[]),
] as const;

/** Writes the tiny model folder in `style`; a UsageError naming the flag for an unknown style or family. */
export async function writeModelInStyle(dir: string, style: string, o: TinyModelOptions): Promise<LlamaConfig> {
  if (!(MODEL_STYLES as readonly string[]).includes(style))
    throw new UsageError(`Expected --style ${MODEL_STYLES.join(", ")} but received "${style}"`);
  if (o.family !== undefined && !FAMILIES.includes(o.family as Family))
    throw new UsageError(`Expected --family ${FAMILIES.join(", ")} but received "${o.family}"`);
  if (isOwnFamily(o.family)) return writeFamilyModel(dir, style, { ...o, family: o.family });
  if (style === "merged") return writeMergedModel(dir, o);
  if (style in GENAI_STYLES) {
    if (o.family !== undefined && o.family !== "llama")
      throw new UsageError(
        `Expected --family llama with --style ${style} (genai builds are written for the llama shape) but received "${o.family}"`,
      );
    return writeTinyModel(dir, o, genaiFiles(GENAI_STYLES[style as keyof typeof GENAI_STYLES]));
  }
  if (style in QUANTIZED_STYLES)
    return writeTinyModel(dir, o, quantizedFiles(style as QuantizedStyle, o.withPast ?? false));
  const config = await writeTinyModel(dir, { ...o, withPast: style === "with-past" || (o.withPast ?? false) });
  if (style === "dynamo-names" || style === "anonymous") await renameModelFile(dir, style, o.seed ?? 1);
  return config;
}
