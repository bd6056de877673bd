/**
 * Prompt construction, exactly the benchmark's `build_prompt` (contracts.md §2).
 * No chat template, for base and instruct models alike.
 */

/** The anchor template; `{query}` is replaced by the question. */
export const ANCHOR_TEMPLATE = "Question: {query}\nAnswer with only the shortest correct answer.\nAnswer:";
/** Every other family carries its own surface form and gets only the cue. */
export const PERTURBED_TEMPLATE = "{query}\nAnswer:";
export const ANCHOR_FAMILY = "anchor";

/**
 * The prompt for one bank row.
 * @example buildPrompt({ condition_family: "typo", query: "Captial of France?" }) // "Captial of France?\nAnswer:"
 */
export function buildPrompt(row: { condition_family: string; query: string }): string {
  // Plain concatenation: a replace() would interpret `$&` and friends inside the query.
  return row.condition_family === ANCHOR_FAMILY
    ? `Question: ${row.query}\nAnswer with only the shortest correct answer.\nAnswer:`
    : `${row.query}\nAnswer:`;
}
