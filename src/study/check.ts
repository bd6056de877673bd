/**
 * What stops a study before any model runs, whether it runs here (`hsm study`)
 * or as SLURM jobs (`hsm study --slurm`): a missing or invalid bank, and
 * decoding settings other than the ones the pipeline runs.
 */
import { stat } from "node:fs/promises";

import { readBank, type BankRow } from "../bank/bank.js";
import { MAX_NEW_TOKENS, MAX_PROMPT_LEN } from "../defaults.js";
import { StudyFileError, type Study } from "./study-file.js";

/** Refuses decoding settings the pipeline does not run. */
function checkDecoding(study: Study): void {
  const runs: [key: "max_new_tokens" | "max_prompt_len", supported: number][] = [
    ["max_new_tokens", MAX_NEW_TOKENS],
    ["max_prompt_len", MAX_PROMPT_LEN],
  ];
  for (const [key, supported] of runs) {
    const given = study.generation[key];
    if (given !== supported) {
      throw new StudyFileError(
        study.file,
        study.lines[`generation.${key}`],
        `generation.${key}`,
        `hsm runs models with the benchmark's ${key} = ${supported}; expected ${supported} but received ${given}`,
      );
    }
  }
}

/**
 * Checks that a study can run at all and returns its bank's rows: the bank
 * exists (a StudyFileError naming the study's field otherwise), every line of
 * it is a valid query (the bank's own BankError), and, where the study runs a
 * model, its decoding settings are the ones hsm runs.
 */
export async function checkStudy(study: Study): Promise<BankRow[]> {
  if (!(await stat(study.bank).catch(() => undefined)))
    throw new StudyFileError(study.file, study.lines.bank, "bank", `${study.bank}: no such file`);
  if (study.models.some((m) => m.modelDir !== undefined)) checkDecoding(study);
  return readBank(study.bank);
}
