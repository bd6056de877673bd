/**
 * Prompt tokenization with the model's own HuggingFace tokenizer
 * (@huggingface/tokenizers), special tokens as the tokenizer defines, and left
 * truncation that keeps the special prefix (BOS) — as HuggingFace does with
 * `truncation_side="left"`. The library does not truncate; this part is ours.
 */
import { join } from "node:path";

import { Tokenizer } from "@huggingface/tokenizers";

import { MAX_PROMPT_LEN } from "../defaults.js";
import { readText } from "../util/fs.js";
import { jsonObject, ModelDirError, type ModelDir } from "./model-dir.js";

export class PromptTokenizer {
  private constructor(
    readonly tokenizer: Tokenizer,
    /** Tokens the post-processor puts before and after every sequence (a BOS, say). */
    readonly prefix: number[],
    readonly suffix: number[],
    /** Largest token id the tokenizer can produce, plus one. */
    readonly size: number,
    readonly padId: number,
    readonly eosIds: number[],
    /** 1 for ids that decode to text, 0 for special tokens and ids the tokenizer does not know. */
    private readonly textual: Uint8Array,
  ) {}

  static async load(dir: string): Promise<PromptTokenizer> {
    const read = async (name: string) => {
      const path = join(dir, name);
      let value: unknown;
      try {
        value = JSON.parse(await readText(path, { follow: true }));
      } catch (err) {
        throw new ModelDirError(path, `cannot be read as JSON (${(err as Error).message})`);
      }
      return jsonObject(value, path);
    };
    const [json, config] = await Promise.all([read("tokenizer.json"), read("tokenizer_config.json")]);
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(json, config);
    } catch (err) {
      throw new ModelDirError(
        join(dir, "tokenizer.json"),
        `is not a tokenizer this tool can load (${(err as Error).message})`,
      );
    }
    // What the post-processor adds is found by comparing one text with and without special tokens.
    const probe = "Question: probe\nAnswer:";
    const plain: number[] = tokenizer.encode(probe, { add_special_tokens: false }).ids;
    const full: number[] = tokenizer.encode(probe, { add_special_tokens: true }).ids;
    let at = -1;
    for (let i = 0; i + plain.length <= full.length && at < 0; i++) {
      if (plain.every((t, j) => full[i + j] === t)) at = i;
    }
    if (at < 0)
      throw new ModelDirError(
        join(dir, "tokenizer.json"),
        "adds special tokens inside the text, which left truncation cannot handle",
      );
    const vocab = tokenizer.get_vocab(true);
    let size = 0;
    for (const id of vocab.values()) if (id + 1 > size) size = id + 1;
    const tokenId = (v: unknown) => {
      const s =
        typeof v === "string"
          ? v
          : v && typeof v === "object" && "content" in v
            ? String((v as { content: unknown }).content)
            : undefined;
      return s === undefined ? undefined : vocab.get(s);
    };
    const eos = tokenId(config.eos_token);
    const padId = tokenId(config.pad_token) ?? eos ?? 0;
    // HuggingFace's skip_special_tokens drops exactly the added tokens tokenizer.json marks special.
    const textual = new Uint8Array(size);
    for (const id of vocab.values()) textual[id] = 1;
    for (const t of (json.added_tokens ?? []) as { id?: unknown; special?: unknown }[]) {
      if (t.special === true && typeof t.id === "number" && t.id < size) textual[t.id] = 0;
    }
    return new PromptTokenizer(
      tokenizer,
      full.slice(0, at),
      full.slice(at + plain.length),
      size,
      padId,
      eos === undefined ? [] : [eos],
      textual,
    );
  }

  /**
   * Token ids of `prompt`, at most `maxLen` long: when longer, tokens are
   * dropped from the left of the text, never from the special prefix.
   */
  encode(prompt: string, maxLen = MAX_PROMPT_LEN): number[] {
    const ids = this.tokenizer.encode(prompt, { add_special_tokens: false }).ids;
    const room = maxLen - this.prefix.length - this.suffix.length;
    const kept = ids.length > room ? ids.slice(ids.length - Math.max(room, 0)) : ids;
    return [...this.prefix, ...kept, ...this.suffix];
  }

  /**
   * The text of generated ids as HuggingFace's `decode(ids,
   * skip_special_tokens=True, clean_up_tokenization_spaces=False)` gives it:
   * special tokens (and ids the tokenizer does not know) skipped, the bytes of
   * the rest decoded at once (U+FFFD for invalid sequences), nothing stripped.
   */
  decode(ids: readonly number[]): string {
    const kept = ids.filter((id) => id >= 0 && id < this.size && this.textual[id] === 1);
    if (kept.length === 0) return "";
    return this.tokenizer.decode(kept, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /**
   * Checks that this tokenizer belongs to a model whose embedding has
   * `vocabSize` rows: every id must fit, and the model may pad its vocabulary
   * only a little beyond the tokenizer's (2%, or 1024 rows).
   */
  checkVocab(vocabSize: number, where: string): void {
    const slack = Math.max(1024, Math.floor(0.02 * vocabSize));
    if (this.size > vocabSize || vocabSize - this.size > slack) {
      throw new ModelDirError(
        where,
        `the tokenizer has ${this.size} tokens but the model's vocabulary has ${vocabSize} rows; they do not belong together`,
      );
    }
  }
}

/**
 * The model's tokenizer, checked against its config, and its graph file as
 * `read` gives it (generation reads every byte, extraction its structure):
 * the file is read in another thread while this one loads the tokenizer, and
 * a tokenizer error is reported first.
 */
export async function tokenizerAndModel<T>(
  md: ModelDir,
  read: (path: string) => Promise<T>,
): Promise<{ tokenizer: PromptTokenizer; source: T }> {
  const reading = read(md.onnxPath);
  reading.catch(() => {});
  const tokenizer = await PromptTokenizer.load(md.dir);
  tokenizer.checkVocab(md.config.vocabSize, `${md.dir}/tokenizer.json`);
  return { tokenizer, source: await reading };
}
