/**
 * computeCores: the physical cores among the CPUs a process may use, read from
 * a /proc and /sys laid out as Linux lays them out, capped by a cgroup's quota.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";

import { describe, expect, it } from "vitest";

import { computeCores } from "../../src/util/cores.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-cores-");
let roots = 0;

/** A file system root with these files (path → content). */
function root(files: Record<string, string>): string {
  const r = join(dir, `root${roots++}`);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(r, path)), { recursive: true });
    writeFileSync(join(r, path), text);
  }
  return r;
}

/** Topology files of CPUs, each [package, core]. */
function topology(cpus: [number, number][]): Record<string, string> {
  const files: Record<string, string> = {};
  cpus.forEach(([pkg, core], cpu) => {
    files[`sys/devices/system/cpu/cpu${cpu}/topology/physical_package_id`] = `${pkg}\n`;
    files[`sys/devices/system/cpu/cpu${cpu}/topology/core_id`] = `${core}\n`;
  });
  return files;
}

const status = (allowed: string) =>
  `Name:\tnode\nCpus_allowed:\tff\nCpus_allowed_list:\t${allowed}\nMems_allowed:\t1\n`;

// Two packages of two cores with two hardware threads each, numbered as Linux numbers them:
// cpu0-3 the first thread of each core, cpu4-7 their siblings.
const smt = topology([
  [0, 0],
  [0, 1],
  [1, 0],
  [1, 1],
  [0, 0],
  [0, 1],
  [1, 0],
  [1, 1],
]);

describe("computeCores", () => {
  it("counts each core once, however many of its threads are allowed", () => {
    expect(computeCores(root({ ...smt, "proc/self/status": status("0-7") }))).toBe(4);
    expect(computeCores(root({ ...smt, "proc/self/status": status("0,4") }))).toBe(1);
    expect(computeCores(root({ ...smt, "proc/self/status": status("1-2,5") }))).toBe(2);
  });

  it("tells apart cores with the same number in different packages", () => {
    expect(computeCores(root({ ...smt, "proc/self/status": status("0,2") }))).toBe(2);
  });

  it("counts every core of a machine without hardware threads", () => {
    const r = root({
      ...topology([
        [0, 0],
        [0, 1],
      ]),
      "proc/self/status": status("0-1"),
    });
    expect(computeCores(r)).toBe(2);
  });

  it("holds to a cgroup's CPU quota, rounded up", () => {
    const base = { ...smt, "proc/self/status": status("0-7"), "proc/self/cgroup": "0::/job/42\n" };
    expect(computeCores(root({ ...base, "sys/fs/cgroup/job/42/cpu.max": "150000 100000\n" }))).toBe(2);
    expect(computeCores(root({ ...base, "sys/fs/cgroup/job/42/cpu.max": "max 100000\n" }))).toBe(4);
    // A quota under one CPU still leaves one thread.
    expect(computeCores(root({ ...base, "sys/fs/cgroup/job/42/cpu.max": "20000 100000\n" }))).toBe(1);
    // cgroup v1 only: no quota read.
    expect(computeCores(root({ ...smt, "proc/self/status": status("0-7"), "proc/self/cgroup": "4:cpu:/\n" }))).toBe(4);
  });

  it("falls back to the CPUs Node counts where the topology cannot be read", () => {
    expect(computeCores(root({ "proc/self/status": status("0-3") }))).toBe(availableParallelism());
    expect(computeCores(root({ ...smt, "proc/self/status": "Name:\tnode\n" }))).toBe(availableParallelism());
    expect(computeCores(root({ ...smt, "proc/self/status": status("0-x") }))).toBe(availableParallelism());
    expect(computeCores(join(dir, "nothing"))).toBe(availableParallelism());
  });

  it("reads this machine's own topology", () => {
    const n = computeCores();
    expect(n).toBeGreaterThanOrEqual(1);
    expect(n).toBeLessThanOrEqual(availableParallelism());
  });
});
