/**
 * `--shard auto`: the shard a process extracts, taken from an array-capable
 * scheduler's own variables, so one job script serves every task of an array.
 *
 *   auto     SLURM: K = SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN,
 *            N = SLURM_ARRAY_TASK_COUNT (a contiguous array, e.g. --array=1-4)
 *   auto/N   K = SLURM_ARRAY_TASK_ID, or a Kubernetes Indexed Job's
 *            JOB_COMPLETION_INDEX; the array's indices are the shard numbers,
 *            so an array of some shards only (--array=1,3) works
 */
import { DEFAULT_COMMIT_ROWS } from "../defaults.js";
import { UsageError } from "../errors.js";

function integer(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const text = env[name];
  if (text === undefined || text === "") return undefined;
  if (!/^[0-9]+$/.test(text)) throw new UsageError(`--shard auto: expected an integer in ${name} but found "${text}"`);
  return Number(text);
}

/**
 * The shard `auto` or `auto/N` stands for in the environment `env`; throws a
 * UsageError naming the variables when they are absent or do not fit.
 * @example shardFromEnv("auto/4", { SLURM_ARRAY_TASK_ID: "2" }) // { index: 2, count: 4 }
 */
export function shardFromEnv(text: string, env: NodeJS.ProcessEnv = process.env): { index: number; count: number } {
  const m = /^auto(?:\/([0-9]+))?$/.exec(text.trim());
  if (!m) throw new UsageError(`Expected --shard K/N, auto or auto/N but received "${text}"`);
  const slurmId = integer(env, "SLURM_ARRAY_TASK_ID");
  const k8sIndex = integer(env, "JOB_COMPLETION_INDEX");
  if (m[1] !== undefined) {
    const count = Number(m[1]);
    const index = slurmId ?? k8sIndex;
    if (index === undefined)
      throw new UsageError(
        "--shard auto/N: neither SLURM_ARRAY_TASK_ID (a SLURM job array) nor JOB_COMPLETION_INDEX (a Kubernetes " +
          "Indexed Job) is set; run it as an array task, or give the shard as --shard K/N",
      );
    const from = slurmId !== undefined ? "SLURM_ARRAY_TASK_ID" : "JOB_COMPLETION_INDEX";
    if (count < 1 || index >= count)
      throw new UsageError(`--shard ${text}: ${from} is ${index}, expected a shard number from 0 to ${count - 1}`);
    return { index, count };
  }
  if (slurmId === undefined) {
    throw new UsageError(
      k8sIndex !== undefined
        ? "--shard auto: a Kubernetes Indexed Job does not say how many shards there are; give them: --shard auto/N"
        : "--shard auto: SLURM_ARRAY_TASK_ID is not set (not a SLURM array task); submit with sbatch --array, or give the shard as --shard K/N",
    );
  }
  const min = integer(env, "SLURM_ARRAY_TASK_MIN") ?? 0;
  const max = integer(env, "SLURM_ARRAY_TASK_MAX");
  const count = integer(env, "SLURM_ARRAY_TASK_COUNT");
  if (count === undefined)
    throw new UsageError("--shard auto: SLURM_ARRAY_TASK_COUNT is not set; give the shard count: --shard auto/N");
  if (max !== undefined && max - min + 1 !== count)
    throw new UsageError(
      `--shard auto: the array ${min}-${max} holds ${count} tasks, not one per index (a step or a list); ` +
        "number its tasks by shard and give the count: --shard auto/N",
    );
  return { index: slurmId - min, count };
}

/** Rows `[start, end)` of shard `index` of `count`, cut on commit-block boundaries. */
export function shardRange(
  total: number,
  index: number,
  count: number,
  commitRows = DEFAULT_COMMIT_ROWS,
): [number, number] {
  const cut = (k: number) =>
    k >= count ? total : Math.min(total, Math.floor((k * total) / count / commitRows) * commitRows);
  return [cut(index), cut(index + 1)];
}
