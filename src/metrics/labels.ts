/**
 * Labels for KTS, from the scored file (joined on query_id): 1 for correct,
 * 0 for incorrect, left out otherwise (abstain counts as 0 on request).
 */
import { ScoredError } from "../errors.js";
import { LABELS } from "../score/labels.js";
import { nativeJsonlScan } from "../kernels/native.js";
import { jsonlFields } from "../util/jsonl.js";

/** The marker for a row that has no 0/1 label. */
export const NO_LABEL = 255;

export interface LabelOptions {
  abstainAsIncorrect?: boolean;
  allowMissingLabels?: boolean;
}

/** 0/1 (or NO_LABEL) for each of `queryIds`, read from a scored JSONL file. */
export async function readLabels(file: string, queryIds: readonly string[], o: LabelOptions = {}): Promise<Uint8Array> {
  const want = new Map<string, number>();
  for (let i = 0; i < queryIds.length; i++) want.set(queryIds[i]!, i); // no [key, value] pair per row to collect
  const y = new Uint8Array(queryIds.length).fill(NO_LABEL);
  const seen = new Uint8Array(queryIds.length);
  // Only the two members are taken from each row: the native scan cuts them out of plain rows unparsed.
  await jsonlFields(
    file,
    ["query_id", "label"],
    (l, problem, cause) => new ScoredError(file, l, undefined, problem, { cause }),
    ([queryId, label], line) => {
      if (typeof queryId !== "string") throw new ScoredError(file, line, "query_id", "expected a string");
      if (typeof label !== "string" || !(LABELS as readonly string[]).includes(label)) {
        throw new ScoredError(file, line, "label", `${JSON.stringify(label)} is not one of ${LABELS.join(", ")}`);
      }
      const i = want.get(queryId);
      if (i === undefined) return; // rows outside the store (not main-forward) are fine
      if (seen[i]) throw new ScoredError(file, line, "query_id", `"${queryId}" is scored twice`);
      seen[i] = 1;
      y[i] =
        label === "correct" ? 1 : label === "incorrect" || (label === "abstain" && o.abstainAsIncorrect) ? 0 : NO_LABEL;
    },
    nativeJsonlScan,
  );
  let missing = 0;
  let firstMissing = -1;
  seen.forEach((s, i) => {
    if (!s) {
      missing++;
      if (firstMissing < 0) firstMissing = i;
    }
  });
  if (missing > 0 && !o.allowMissingLabels) {
    throw new ScoredError(
      file,
      0,
      undefined,
      `${missing} of the store's ${queryIds.length} rows have no scored row (first: "${queryIds[firstMissing]}"); pass --allow-missing-labels to leave them out`,
    );
  }
  return y;
}
