/**
 * Prompt construction, exactly the benchmark's `build_prompt`.
 * No chat template, for base and instruct models alike. The two templates below
 * are the only place the prompt text is written down.
 */

/** The anchor template; `{query}` is replaced by the question. */
export const ANCHOR_TEMPLATE = "Question: {query}\nAnswer with only the shortest correct answer.\nAnswer:";
/** Every other family carries its own surface form and gets only the cue. */
export const PERTURBED_TEMPLATE = "{query}\nAnswer:";
export const ANCHOR_FAMILY = "anchor";

/** A template split around its one `{query}`. */
function split(template: string): [string, string] {
  const at = template.indexOf("{query}");
  return [template.slice(0, at), template.slice(at + "{query}".length)];
}

const ANCHOR = split(ANCHOR_TEMPLATE);
const PERTURBED = split(PERTURBED_TEMPLATE);

/**
 * The prompt for one bank row.
 * @example buildPrompt({ condition_family: "typo", query: "Captial of France?" }) // "Captial of France?\nAnswer:"
 */
export function buildPrompt(row: { condition_family: string; query: string }): string {
  // Plain concatenation: a replace() would interpret `$&` and friends inside the query.
  const [before, after] = row.condition_family === ANCHOR_FAMILY ? ANCHOR : PERTURBED;
  return before + row.query + after;
}
