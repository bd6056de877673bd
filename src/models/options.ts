/** Checks a tiny model's geometry before anything is built. */
import { DEFAULT_TINY_MODEL } from "../defaults.js";
import { UsageError } from "../errors.js";
import { TOKENIZERS, type ModelFiles, type TinyModelOptions, type TokenizerName } from "./llama.js";
import { genaiFiles } from "./genai.js";
import { QUANTIZED_STYLES, quantizedFiles, type QuantizedStyle } from "./quantize.js";

/**
 * The export styles `hsm make-model --style` writes: `plain` (torch-style
 * model.onnx), `with-past` (plus the KV cache), the onnxruntime-genai builds
 * of genai.ts (fp32, fp16, int4), and the transformers.js quantized and
 * float16 files of quantize.ts.
 */
export const MODEL_STYLES = ["plain", "with-past", "genai", "genai-fp16", "genai-int4", ...(Object.keys(QUANTIZED_STYLES) as QuantizedStyle[])] as const;
export type ModelStyle = (typeof MODEL_STYLES)[number];

/** The files a style writes besides the tokenizer's; undefined for the plain layout (model.onnx + config.json). */
export function modelFiles(o: TinyModelOptions): ModelFiles | undefined {
  const style = (o.style ?? "plain") as ModelStyle;
  if (style === "plain" || style === "with-past") return undefined;
  if (style === "genai") return genaiFiles("fp32");
  if (style === "genai-fp16") return genaiFiles("fp16");
  if (style === "genai-int4") return genaiFiles("int4");
  return quantizedFiles(style, o.withPast ?? false);
}

/**
 * The options with every default filled in (src/defaults.ts), or a UsageError
 * naming the `hsm make-model` flag to change: an unknown tokenizer, a head
 * width that is not an even integer, key/value heads that do not divide the heads.
 */
export function validateTinyModelOptions(o: TinyModelOptions = {}): TinyModelOptions {
  const tokenizer: string = o.tokenizer ?? DEFAULT_TINY_MODEL.tokenizer;
  if (!(tokenizer in TOKENIZERS)) throw new UsageError(`Expected --tokenizer ${Object.keys(TOKENIZERS).join(" or ")} but received "${tokenizer}"`);
  const hidden = o.hidden ?? DEFAULT_TINY_MODEL.hidden;
  const heads = o.heads ?? DEFAULT_TINY_MODEL.heads;
  if (hidden % heads !== 0 || (hidden / heads) % 2 !== 0) throw new UsageError(`Expected --hidden to be an even multiple of --heads per head, but ${hidden} / ${heads} is not`);
  const kvHeads = o.kvHeads ?? Math.max(1, heads / 2);
  const style = o.style ?? "plain";
  if (!(MODEL_STYLES as readonly string[]).includes(style)) throw new UsageError(`Expected --style ${MODEL_STYLES.slice(0, -1).join(", ")} or ${MODEL_STYLES.at(-1)} but received "${style}"`);
  if (!Number.isInteger(kvHeads) || heads % kvHeads !== 0) throw new UsageError(`Expected --kv-heads to divide --heads (${heads}) but received ${kvHeads}`);
  return {
    ...o,
    layers: o.layers ?? DEFAULT_TINY_MODEL.layers,
    hidden,
    heads,
    kvHeads,
    tokenizer: tokenizer as TokenizerName,
    seed: o.seed ?? DEFAULT_TINY_MODEL.seed,
    ...(style === "with-past" ? { withPast: true } : {}),
  };
}
