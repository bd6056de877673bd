/**
 * Where the JavaScript tokenizer library (@huggingface/tokenizers) departs
 * from HuggingFace's own tokenizers and transformers, and what this tool does
 * instead, so that prompts are the ids HuggingFace gives and answers the text
 * it decodes:
 *
 * - the special tokens a `TemplateProcessing` post-processor adds are the
 *   `ids` of its `special_tokens` entries (the library looks their keys up in
 *   the vocabulary instead: {@link templateEnds});
 * - a run of byte tokens (`<0xE5>`) that is not valid UTF-8 decodes to one
 *   U+FFFD per byte, and a byte-order mark is kept (ByteFallback);
 * - the GPT-2 split of a byte-level pre-tokenizer treats as whitespace what
 *   Unicode calls White_Space (JavaScript's `\s` adds U+FEFF and misses U+0085);
 * - `tokenizer_config.json`'s `remove_space` and
 *   `do_lowercase_and_remove_accent` belong to slow tokenizers, which fast
 *   tokenizers do not read; its `split_special_tokens` makes special-token
 *   text in a prompt plain text ({@link encodingJson}).
 */
import * as tokenizers from "@huggingface/tokenizers";
import type { Tokenizer } from "@huggingface/tokenizers";

import { ModelDirError } from "./model-dir.js";

type Json = Record<string, unknown>;

interface DecoderPart {
  decode_chain(tokens: string[]): string[];
}
/**
 * The library's classes this module adjusts, as it uses them: the package's
 * own declarations of them do not resolve under NodeNext (their re-exports
 * omit file extensions), though the classes are exported.
 */
const library = tokenizers as unknown as {
  ByteFallbackDecoder: abstract new (...args: never[]) => DecoderPart;
  SequenceDecoder: abstract new (...args: never[]) => DecoderPart & { decoders: unknown[] };
  ByteLevelPreTokenizer: abstract new (...args: never[]) => { pattern: RegExp };
  SequencePreTokenizer: abstract new (...args: never[]) => { tokenizers: unknown[] };
};

/** `tokenizer_config.json` as fast tokenizers read it: without the options of slow tokenizers alone. */
export function fastConfig(config: Json): Json {
  const { remove_space: _removeSpace, do_lowercase_and_remove_accent: _lowercase, ...rest } = config;
  return rest;
}

/**
 * `tokenizer.json` for encoding prompts: where `tokenizer_config.json` sets
 * `split_special_tokens`, special added tokens are no longer matched in the
 * text (transformers' `encode_special_tokens`), so that a prompt holding
 * "<|begin_of_text|>" is tokenized as the characters it is; otherwise `json` itself.
 */
export function encodingJson(json: Json, config: Json): Json {
  if (config.split_special_tokens !== true || !Array.isArray(json.added_tokens)) return json;
  return { ...json, added_tokens: json.added_tokens.filter((t) => (t as { special?: unknown }).special !== true) };
}

/**
 * The ids a `TemplateProcessing` post-processor (alone, or in a sequence
 * beside processors that add no tokens) puts before and after a single
 * sequence; undefined for other post-processors. `path` names the file in errors.
 */
export function templateEnds(json: Json, path: string): { prefix: number[]; suffix: number[] } | undefined {
  const post = json.post_processor as Json | null | undefined;
  if (!post || typeof post !== "object") return undefined;
  let template: Json | undefined;
  if (post.type === "TemplateProcessing") template = post;
  else if (post.type === "Sequence" && Array.isArray(post.processors)) {
    const processors = post.processors as Json[];
    const templates = processors.filter((p) => p?.type === "TemplateProcessing");
    if (templates.length !== 1 || !processors.every((p) => p?.type === "TemplateProcessing" || p?.type === "ByteLevel"))
      return undefined;
    template = templates[0];
  }
  if (!template) return undefined;
  const field = "post_processor's TemplateProcessing";
  const single = template.single;
  if (!Array.isArray(single)) throw new ModelDirError(path, `${field} has no "single" template list`);
  const special = (template.special_tokens ?? {}) as Record<string, { ids?: unknown }>;
  const prefix: number[] = [];
  const suffix: number[] = [];
  let sequences = 0;
  for (const item of single as Json[]) {
    const token = (item as { SpecialToken?: { id?: unknown } }).SpecialToken;
    if (token) {
      const ids = typeof token.id === "string" && Object.hasOwn(special, token.id) ? special[token.id]!.ids : undefined;
      if (!Array.isArray(ids) || !ids.every((id) => Number.isSafeInteger(id) && id >= 0))
        throw new ModelDirError(
          path,
          `${field} names the special token ${JSON.stringify(token.id)}, whose "ids" its special_tokens does not give`,
        );
      (sequences === 0 ? prefix : suffix).push(...(ids as number[]));
    } else if ((item as { Sequence?: { id?: unknown } }).Sequence?.id === "A") sequences++;
    else throw new ModelDirError(path, `${field}'s "single" template holds ${JSON.stringify(item).slice(0, 60)}`);
  }
  if (sequences !== 1)
    throw new ModelDirError(path, `${field}'s "single" template holds the text ${sequences} times, not once`);
  return { prefix, suffix };
}

/** Strict UTF-8 that keeps a byte-order mark, as Rust's String::from_utf8 reads bytes. */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** HuggingFace's ByteFallback: a run of byte tokens decodes at once, or to one U+FFFD per byte where invalid. */
function byteFallbackChain(tokens: string[]): string[] {
  const out: string[] = [];
  let bytes: number[] = [];
  const flush = () => {
    if (bytes.length === 0) return;
    try {
      out.push(utf8.decode(Uint8Array.from(bytes)));
    } catch {
      out.push(...bytes.map(() => "\uFFFD"));
    }
    bytes = [];
  };
  for (const token of tokens) {
    const byte = /^<0x[0-9A-Fa-f]{2}>$/.test(token) ? parseInt(token.slice(3, 5), 16) : undefined;
    if (byte === undefined) {
      flush();
      out.push(token);
    } else bytes.push(byte);
  }
  flush();
  return out;
}

/** The GPT-2 split of HuggingFace's ByteLevel pre-tokenizer, its `\s` Unicode's White_Space as Oniguruma reads it. */
const GPT2_SPLIT =
  /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+/gu;

function fixDecoder(decoder: unknown): void {
  if (decoder instanceof library.ByteFallbackDecoder) decoder.decode_chain = byteFallbackChain;
  else if (decoder instanceof library.SequenceDecoder) decoder.decoders.forEach(fixDecoder);
}

function fixPreTokenizer(pre: unknown): void {
  if (pre instanceof library.ByteLevelPreTokenizer) pre.pattern = GPT2_SPLIT;
  else if (pre instanceof library.SequencePreTokenizer) pre.tokenizers.forEach(fixPreTokenizer);
}

/** Makes a loaded tokenizer decode and pre-tokenize as HuggingFace does (see the module's notes); returns it. */
export function asHuggingFace(tokenizer: Tokenizer): Tokenizer {
  fixDecoder(tokenizer.decoder);
  fixPreTokenizer(tokenizer.pre_tokenizer);
  return tokenizer;
}
