/**
 * A byte-level BPE tokenizer cut to its first ranks: the vocabulary's ids
 * below `ranks`, the merges that make them, and every added (special) token
 * renumbered after them in id order. Byte-level BPE keeps all 256 byte tokens
 * among its first ranks, so the cut tokenizer still encodes every text: it
 * only stops merging earlier, as the same training stopped early would have.
 * The files stay in HuggingFace's format (tokenizer.json and
 * tokenizer_config.json); only the ids of the special tokens change.
 */
import { InternalError } from "../errors.js";

type Json = Record<string, unknown>;

interface BpeModel {
  vocab: Record<string, number>;
  /** "a b" strings, or [a, b] pairs in the newer layout. */
  merges: (string | [string, string])[];
}

/** Cuts `tokenizer` (tokenizer.json) and `config` (tokenizer_config.json) to their first `ranks` ranks; both are left unchanged. */
export function cutTokenizer(tokenizer: Json, config: Json, ranks: number): { tokenizer: string; config: string } {
  const model = tokenizer.model as BpeModel;
  if (Object.values(model.vocab).filter((id) => id < ranks).length !== ranks)
    throw new InternalError(`the tokenizer's vocabulary does not hold every id below ${ranks}`);
  const added = [...((tokenizer.added_tokens ?? []) as { id: number }[])].sort((a, b) => a.id - b.id);
  const renumbered = new Map(added.map((t, i) => [t.id, ranks + i]));
  const id = (old: number): number => {
    if (old < ranks) return old;
    const now = renumbered.get(old);
    if (now === undefined)
      throw new InternalError(`token ${old} is neither among the first ${ranks} nor an added token`);
    return now;
  };
  const vocab = Object.fromEntries(Object.entries(model.vocab).filter(([, i]) => i < ranks));
  const merges = model.merges.filter((m) => {
    const [a, b] = typeof m === "string" ? m.split(" ") : m;
    return vocab[a!] !== undefined && vocab[b!] !== undefined && vocab[a! + b!] !== undefined;
  });
  const cut: Json = {
    ...tokenizer,
    added_tokens: added.map((t) => ({ ...t, id: id(t.id) })),
    post_processor: renumberSpecial(tokenizer.post_processor, id),
    model: { ...model, vocab, merges },
  };
  const decoder = (config.added_tokens_decoder ?? {}) as Record<string, unknown>;
  const cutConfig: Json = {
    ...config,
    added_tokens_decoder: Object.fromEntries(Object.entries(decoder).map(([k, v]) => [String(id(Number(k))), v])),
  };
  return { tokenizer: JSON.stringify(cut), config: JSON.stringify(cutConfig, null, 2) };
}

/** The post-processor with the `ids` of its special tokens (TemplateProcessing's `special_tokens`) renumbered, however deeply nested. */
function renumberSpecial(node: unknown, id: (old: number) => number): unknown {
  if (Array.isArray(node)) return node.map((n) => renumberSpecial(n, id));
  if (!node || typeof node !== "object") return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node as Json)) {
    if (k === "special_tokens" && v && typeof v === "object") {
      out[k] = Object.fromEntries(
        Object.entries(v as Record<string, Json>).map(([name, t]) => [
          name,
          { ...t, ids: (t.ids as number[]).map(id) },
        ]),
      );
    } else out[k] = renumberSpecial(v, id);
  }
  return out;
}
