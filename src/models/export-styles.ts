/**
 * The export styles `hsm make-model --style` writes from the tiny model's
 * seeded weights, beside the plain optimum graph: the with-past graph, the
 * merged decoder, and the renamed graphs whose names say nothing. Every style
 * may take another family's graph shape (`--family`), external weights and
 * no `position_ids` input.
 */
import { UsageError } from "../errors.js";
import { FAMILIES, writeTinyModel, type Family, type LlamaConfig, type TinyModelOptions } from "./llama.js";
import { writeMergedModel } from "./merged.js";
import { renameModelFile } from "./rename.js";

export const MODEL_STYLES = ["plain", "with-past", "merged", "dynamo-names", "anonymous"] as const;

/** Writes the tiny model folder in `style`; a UsageError naming the flag for an unknown style or family. */
export async function writeModelInStyle(dir: string, style: string, o: TinyModelOptions): Promise<LlamaConfig> {
  if (!(MODEL_STYLES as readonly string[]).includes(style)) throw new UsageError(`Expected --style ${MODEL_STYLES.join(", ")} but received "${style}"`);
  if (o.family !== undefined && !FAMILIES.includes(o.family as Family)) throw new UsageError(`Expected --family ${FAMILIES.join(", ")} but received "${o.family}"`);
  if (style === "merged") return writeMergedModel(dir, o);
  const config = await writeTinyModel(dir, { ...o, withPast: style === "with-past" || (o.withPast ?? false) });
  if (style === "dynamo-names" || style === "anonymous") await renameModelFile(dir, style, o.seed ?? 1);
  return config;
}
