/** Checks a tiny model's geometry before anything is built. */
import { DEFAULT_TINY_MODEL } from "../defaults.js";
import { UsageError } from "../errors.js";
import { TOKENIZERS, type TinyModelOptions, type TokenizerName } from "./llama.js";

/**
 * The options with every default filled in (src/defaults.ts), or a UsageError
 * naming the `hsm make-model` flag to change: an unknown tokenizer, a head
 * width that is not an even integer, key/value heads that do not divide the heads.
 */
export function validateTinyModelOptions(o: TinyModelOptions = {}): TinyModelOptions {
  const tokenizer: string = o.tokenizer ?? DEFAULT_TINY_MODEL.tokenizer;
  if (!(tokenizer in TOKENIZERS))
    throw new UsageError(`Expected --tokenizer ${Object.keys(TOKENIZERS).join(", ")} but received "${tokenizer}"`);
  const hidden = o.hidden ?? DEFAULT_TINY_MODEL.hidden;
  const heads = o.heads ?? DEFAULT_TINY_MODEL.heads;
  if (hidden % heads !== 0 || (hidden / heads) % 2 !== 0)
    throw new UsageError(
      `Expected --hidden to be an even multiple of --heads per head, but ${hidden} / ${heads} is not`,
    );
  const kvHeads = o.kvHeads ?? Math.max(1, heads / 2);
  if (!Number.isInteger(kvHeads) || heads % kvHeads !== 0)
    throw new UsageError(`Expected --kv-heads to divide --heads (${heads}) but received ${kvHeads}`);
  return {
    ...o,
    layers: o.layers ?? DEFAULT_TINY_MODEL.layers,
    hidden,
    heads,
    kvHeads,
    tokenizer: tokenizer as TokenizerName,
    seed: o.seed ?? DEFAULT_TINY_MODEL.seed,
  };
}
