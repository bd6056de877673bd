/** Checks a tiny model's geometry before anything is built. */
import { DEFAULT_TINY_MODEL } from "../defaults.js";
import { UsageError } from "../errors.js";
import { TOKENIZERS, type TinyModelOptions, type TokenizerName } from "./llama.js";

/**
 * The most float32 weight bytes a tiny model may hold: half of what one protobuf message, and so one model.onnx,
 * holds (2 GiB), which leaves the graph's own nodes and names room (7 % more at d_model 64).
 */
const MAX_TINY_MODEL_BYTES = 2 ** 30;

const mib = (bytes: number) => `${Math.ceil(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;

/**
 * The options with every default filled in (src/defaults.ts), or a UsageError
 * naming the `hsm make-model` flag to change: an unknown tokenizer, a head
 * width that is not an even integer, key/value heads that do not divide the heads,
 * a geometry whose weights pass {@link MAX_TINY_MODEL_BYTES}.
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
  const layers = o.layers ?? DEFAULT_TINY_MODEL.layers;
  const intermediate = o.intermediate ?? 2 * hidden;
  // A Llama block's projections (q and o, k and v, the MLP's three) and norms; the embedding and the LM head.
  const block = hidden * (2 * hidden + 2 * kvHeads * (hidden / heads)) + 3 * hidden * intermediate + 2 * hidden;
  const { vocab } = TOKENIZERS[tokenizer as TokenizerName];
  const bytes = 4 * (2 * vocab * hidden + layers * block + hidden);
  if (bytes > MAX_TINY_MODEL_BYTES) {
    throw new UsageError(
      `Expected a model of at most ${mib(MAX_TINY_MODEL_BYTES)} of float32 weights, but --layers ${layers}, ` +
        `--hidden ${hidden} and --intermediate ${intermediate} with the ${tokenizer} vocabulary ` +
        `(${vocab.toLocaleString("en-US")} tokens) make ${mib(bytes)}`,
    );
  }
  return {
    ...o,
    layers,
    hidden,
    heads,
    kvHeads,
    tokenizer: tokenizer as TokenizerName,
    seed: o.seed ?? DEFAULT_TINY_MODEL.seed,
  };
}
