/**
 * The decoding rules of `hsm generate` (docs/formats.md#decoding), as HuggingFace
 * `generate` + `decode(..., skip_special_tokens=True)` and vLLM apply them:
 * generation stops after any id of the model's `eos_token_id` (config.json or
 * genai_config.json, an int or a list) or after `max_new_tokens`; the EOS
 * counts in `generated_tokens` but adds no text; special tokens are skipped;
 * the bytes are decoded once, invalid sequences becoming U+FFFD; nothing is
 * stripped.
 */
import { basename, join } from "node:path";

import { ModelDirError, type ModelConfig } from "../model/model-dir.js";
import { readTextIfPresent } from "../util/fs.js";
import { jsonSyntax } from "../util/jsonl.js";

export type FinishReason = "stop" | "length";

/** The fields a generation row carries about its answer. */
export interface Answer {
  raw_response: string;
  generated_tokens: number;
  finish_reason: FinishReason;
}

function idsOf(value: unknown, where: string): number[] {
  if (value === undefined || value === null) return [];
  const list = Array.isArray(value) ? value : [value];
  for (const v of list) {
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
      throw new ModelDirError(
        where,
        `"eos_token_id" must be a token id or a list of token ids, but holds ${JSON.stringify(value)}`,
      );
    }
  }
  return list as number[];
}

/**
 * Every EOS id the model declares: `eos_token_id` of `config.json` (or of its
 * `text_config`) and of `genai_config.json`'s `model` section, an int or a list
 * in either. `config` is the folder's configuration as openModelDir read it: an
 * onnxruntime-genai build with no config.json has genai_config.json's fields
 * there, and a bad value names that file. When neither file names one, the
 * tokenizer's own EOS (`fallback`).
 */
export async function readEosIds(
  modelDir: string,
  config: Pick<ModelConfig, "raw" | "path">,
  fallback: number[] = [],
): Promise<Set<number>> {
  const text = config.raw.text_config as Record<string, unknown> | undefined;
  const ids = [...idsOf(config.raw.eos_token_id ?? text?.eos_token_id, config.path)];
  const genaiPath = join(modelDir, "genai_config.json");
  const genai =
    basename(config.path) === "genai_config.json" ? null : await readTextIfPresent(genaiPath, { follow: true });
  if (genai !== null) {
    let parsed: { model?: { eos_token_id?: unknown } };
    try {
      parsed = JSON.parse(genai);
    } catch (err) {
      throw new ModelDirError(genaiPath, `is not valid JSON (${jsonSyntax(err)})`);
    }
    ids.push(...idsOf(parsed.model?.eos_token_id, genaiPath));
  }
  return new Set(ids.length > 0 ? ids : fallback);
}

/**
 * The row fields of one answer from the ids generated for it — the EOS, when
 * generation stopped on one, included as the last id. `detokenize` turns ids
 * into text with special tokens skipped.
 */
export function answerFields(
  generated: readonly number[],
  eos: ReadonlySet<number>,
  detokenize: (ids: number[]) => string,
): Answer {
  const stopped = generated.length > 0 && eos.has(generated[generated.length - 1]!);
  const text = stopped ? generated.slice(0, -1) : [...generated];
  return {
    raw_response: detokenize(text),
    generated_tokens: generated.length,
    finish_reason: stopped ? "stop" : "length",
  };
}

/**
 * Greedy bookkeeping for a batch: each row collects ids until one is an EOS
 * or it has `maxNew` of them; finished rows ignore what later steps produce.
 */
export class GreedyRows {
  readonly ids: number[][];
  private readonly finished: boolean[];

  constructor(
    rows: number,
    private readonly eos: ReadonlySet<number>,
    private readonly maxNew: number,
  ) {
    this.ids = Array.from({ length: rows }, () => []);
    this.finished = new Array<boolean>(rows).fill(maxNew <= 0);
  }

  /** Takes one step's chosen ids (one per row); true when every row is finished. */
  push(next: ArrayLike<number | bigint>): boolean {
    for (let b = 0; b < this.ids.length; b++) {
      if (this.finished[b]) continue;
      const t = Number(next[b]!);
      this.ids[b]!.push(t);
      if (this.eos.has(t) || this.ids[b]!.length >= this.maxNew) this.finished[b] = true;
    }
    return this.done();
  }

  done(): boolean {
    return this.finished.every(Boolean);
  }
}
