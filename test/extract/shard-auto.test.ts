/** `--shard auto` and `auto/N` against the variables SLURM and Kubernetes set for an array's tasks. */
import { describe, expect, it } from "vitest";

import { UsageError } from "../../src/errors.js";
import { parseShard } from "../../src/extract/extract.js";

/** What `sbatch --array=MIN-MAX` sets for task ID. */
function slurmTask(id: number, min: number, max: number, count = max - min + 1): NodeJS.ProcessEnv {
  return {
    SLURM_ARRAY_TASK_ID: String(id),
    SLURM_ARRAY_TASK_MIN: String(min),
    SLURM_ARRAY_TASK_MAX: String(max),
    SLURM_ARRAY_TASK_COUNT: String(count),
  };
}

describe("--shard auto", () => {
  it("numbers a contiguous SLURM array's tasks from its first index", () => {
    expect(parseShard("auto", slurmTask(0, 0, 2))).toEqual({ index: 0, count: 3 });
    expect(parseShard("auto", slurmTask(2, 0, 2))).toEqual({ index: 2, count: 3 });
    // --array=1-4: task 1 is shard 0 of 4
    expect(parseShard("auto", slurmTask(1, 1, 4))).toEqual({ index: 0, count: 4 });
    expect(parseShard("auto", slurmTask(4, 1, 4))).toEqual({ index: 3, count: 4 });
  });

  it("takes the array index as the shard number when the count is given", () => {
    // --array=1,3 resubmits shards 1 and 3 of 4: the array itself holds 2 tasks from 1 to 3
    expect(parseShard("auto/4", slurmTask(3, 1, 3, 2))).toEqual({ index: 3, count: 4 });
    expect(parseShard("auto/4", { JOB_COMPLETION_INDEX: "2" })).toEqual({ index: 2, count: 4 });
  });

  it("refuses a sparse array without a count, and an index beyond it", () => {
    expect(() => parseShard("auto", slurmTask(3, 1, 3, 2))).toThrow(
      "--shard auto: the array 1-3 holds 2 tasks, not one per index (a step or a list); number its tasks by shard and give the count: --shard auto/N",
    );
    expect(() => parseShard("auto/3", slurmTask(3, 0, 3))).toThrow(
      "--shard auto/3: SLURM_ARRAY_TASK_ID is 3, expected a shard number from 0 to 2",
    );
  });

  it("says which variables are missing", () => {
    expect(() => parseShard("auto", {})).toThrow(
      "--shard auto: SLURM_ARRAY_TASK_ID is not set (not a SLURM array task); submit with sbatch --array, or give the shard as --shard K/N",
    );
    expect(() => parseShard("auto", { JOB_COMPLETION_INDEX: "0" })).toThrow(
      "--shard auto: a Kubernetes Indexed Job does not say how many shards there are; give them: --shard auto/N",
    );
    expect(() => parseShard("auto/2", {})).toThrow(UsageError);
    expect(() => parseShard("auto/2", {})).toThrow(/neither SLURM_ARRAY_TASK_ID .* nor JOB_COMPLETION_INDEX/);
    expect(() => parseShard("auto/x", {})).toThrow('Expected --shard K/N, auto or auto/N but received "auto/x"');
  });
});
