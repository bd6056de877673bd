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
import { jsonSyntax } from "../util/jsonl.js";
import { jsonObject, ModelDirError, type ModelDir } from "./model-dir.js";
import { asHuggingFace, encodingJson, fastConfig, templateEnds } from "./tokenizer-hf.js";

export class PromptTokenizer {
  private constructor(
    readonly tokenizer: Tokenizer,
    /** The tokenizer prompts are encoded with: {@link tokenizer}, but where `split_special_tokens` is set. */
    private readonly encoder: Tokenizer,
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
        throw new ModelDirError(path, `cannot be read as JSON (${jsonSyntax(err)})`);
      }
      return jsonObject(value, path);
    };
    const [json, config] = await Promise.all([read("tokenizer.json"), read("tokenizer_config.json")]);
    const path = join(dir, "tokenizer.json");
    const make = (tokenizerJson: Record<string, unknown>) => {
      try {
        return asHuggingFace(new Tokenizer(tokenizerJson, fastConfig(config)));
      } catch (err) {
        throw new ModelDirError(path, `is not a tokenizer this tool can load (${(err as Error).message})`);
      }
    };
    const tokenizer = make(json);
    const forPrompts = encodingJson(json, config);
    const encoder = forPrompts === json ? tokenizer : make(forPrompts);
    const ends = templateEnds(json, path) ?? probedEnds(tokenizer, path);
    const vocab = tokenizer.get_vocab(true);
    let size = 0;
    for (const id of vocab.values()) if (id + 1 > size) size = id + 1;
    const unknown = [...ends.prefix, ...ends.suffix].find((id) => id >= size);
    if (unknown !== undefined)
      throw new ModelDirError(path, `the post-processor adds the id ${unknown}, which the vocabulary does not hold`);
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
      encoder,
      ends.prefix,
      ends.suffix,
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
    const ids = this.encoder.encode(prompt, { add_special_tokens: false }).ids;
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
 * What a post-processor other than a template adds before and after a text,
 * found by encoding one text with and without special tokens.
 */
function probedEnds(tokenizer: Tokenizer, path: string): { prefix: number[]; suffix: number[] } {
  const probe = "Question: probe\nAnswer:";
  const plain: number[] = tokenizer.encode(probe, { add_special_tokens: false }).ids;
  const full: number[] = tokenizer.encode(probe, { add_special_tokens: true }).ids;
  for (let at = 0; at + plain.length <= full.length; at++) {
    if (plain.every((t, j) => full[at + j] === t))
      return { prefix: full.slice(0, at), suffix: full.slice(at + plain.length) };
  }
  throw new ModelDirError(path, "adds special tokens inside the text, which left truncation cannot handle");
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
