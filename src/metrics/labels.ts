/**
 * Labels for KTS, from the scored file (joined on query_id): 1 for correct,
 * 0 for incorrect, left out otherwise (abstain counts as 0 on request).
 */
import { ScoredError } from "../errors.js";
import { LABELS } from "../score/labels.js";
import { nativeJsonlJoin, nativeJsonlScan } from "../kernels/native.js";
import { jsonlFields, jsonlScanned } from "../util/jsonl.js";

/** The marker for a row that has no 0/1 label. */
export const NO_LABEL = 255;

export interface LabelOptions {
  abstainAsIncorrect?: boolean;
  allowMissingLabels?: boolean;
}

/**
 * 0/1 (or NO_LABEL) for each of `queryIds`, read from a scored JSONL file. With the native core, a plain line is
 * joined to its row in the native scan (no string is made of it); every other line, and any line with a problem,
 * goes through the same checks in TypeScript, which word the errors.
 */
export async function readLabels(file: string, queryIds: readonly string[], o: LabelOptions = {}): Promise<Uint8Array> {
  const y = new Uint8Array(queryIds.length).fill(NO_LABEL);
  const seen = new Uint8Array(queryIds.length);
  const code = (label: string) =>
    label === "correct" ? 1 : label === "incorrect" || (label === "abstain" && o.abstainAsIncorrect) ? 0 : NO_LABEL;
  let want: Map<string, number> | undefined;
  const fail = (l: number, problem: string, cause?: unknown) => new ScoredError(file, l, undefined, problem, { cause });
  // Only the two members are taken from each row, with the checks a row's members get in TypeScript.
  const take = ([queryId, label]: unknown[], line: number) => {
    if (typeof queryId !== "string") throw new ScoredError(file, line, "query_id", "expected a string");
    if (typeof label !== "string" || !(LABELS as readonly string[]).includes(label)) {
      throw new ScoredError(file, line, "label", `${JSON.stringify(label)} is not one of ${LABELS.join(", ")}`);
    }
    if (!want) {
      want = new Map<string, number>();
      for (let i = 0; i < queryIds.length; i++) want.set(queryIds[i]!, i); // no [key, value] pair per row to collect
    }
    const i = want.get(queryId);
    if (i === undefined) return; // rows outside the store (not main-forward) are fine
    if (seen[i]) throw new ScoredError(file, line, "query_id", `"${queryId}" is scored twice`);
    seen[i] = 1;
    y[i] = code(label);
  };
  const keys: [string, string] = ["query_id", "label"];
  // The native join needs ids it can match byte for byte: whole strings without line breaks.
  const join =
    nativeJsonlJoin && queryIds.every((q) => !q.includes("\n") && q.isWellFormed()) ? nativeJsonlJoin : undefined;
  if (!join) {
    await jsonlFields(file, keys, fail, take, nativeJsonlScan);
  } else {
    const rows = join.rows(queryIds);
    const codes = LABELS.map(code);
    await jsonlScanned(file, keys, fail, take, {
      stride: 8,
      scan: (bytes) => join.join(bytes, keys, rows, LABELS),
      plain(found, entry, bytes, line) {
        const i = found[entry + 4]!;
        if (i < 0) return; // rows outside the store
        if (seen[i])
          take([bytes.toString("utf8", found[entry + 6], found[entry + 7]), LABELS[found[entry + 5]!]], line);
        seen[i] = 1;
        y[i] = codes[found[entry + 5]!]!;
      },
    });
  }
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
      `${missing} of the store's ${queryIds.length} rows have no scored row (first: "${queryIds[firstMissing]}"); hsm metrics --allow-missing-labels leaves them out`,
    );
  }
  return y;
}
