import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";

/**
 * The cores this process may compute on: the physical cores among the CPUs
 * its affinity allows (a batch job's or a container's share), each counted
 * once however many hardware threads it has, and no more than a control
 * group's CPU quota rounds up to. Where Linux's topology cannot be read,
 * `os.availableParallelism()`.
 *
 * onnxruntime, left to choose, guesses the physical cores itself and may get
 * them wrong: on a two-vCPU virtual machine it ran extraction on one core.
 * `root` reads another file system's /proc and /sys (tests).
 */
export function computeCores(root = "/"): number {
  const fallback = availableParallelism();
  try {
    const status = readFileSync(join(root, "proc/self/status"), "utf8");
    const allowed = /^Cpus_allowed_list:\s*(\S+)/m.exec(status)?.[1];
    if (allowed === undefined) return fallback;
    const cores = new Set<string>();
    for (const cpu of cpuList(allowed)) {
      const topology = join(root, "sys/devices/system/cpu", `cpu${cpu}`, "topology");
      const pkg = readFileSync(join(topology, "physical_package_id"), "utf8").trim();
      const core = readFileSync(join(topology, "core_id"), "utf8").trim();
      cores.add(`${pkg}:${core}`);
    }
    return Math.max(1, Math.min(cores.size, cpuQuota(root) ?? Infinity));
  } catch {
    return fallback;
  }
}

/** CPU numbers of a kernel CPU list such as "0-3,8,10-11". */
function cpuList(list: string): number[] {
  const cpus: number[] = [];
  for (const part of list.split(",")) {
    const [a, b] = part.split("-").map(Number);
    if (!Number.isInteger(a) || (b !== undefined && !Number.isInteger(b))) throw new Error(`bad CPU list ${list}`);
    for (let c = a!; c <= (b ?? a!); c++) cpus.push(c);
  }
  return cpus;
}

/** CPUs a cgroup v2 quota allows this process (cpu.max "quota period", rounded up), or undefined where none is set. */
function cpuQuota(root: string): number | undefined {
  try {
    const path = /^0::(\S*)$/m.exec(readFileSync(join(root, "proc/self/cgroup"), "utf8"))?.[1];
    if (path === undefined) return undefined;
    const [quota, period] = readFileSync(join(root, "sys/fs/cgroup", path, "cpu.max"), "utf8")
      .trim()
      .split(/\s+/);
    const q = Number(quota),
      p = Number(period);
    return quota === "max" || !(q > 0 && p > 0) ? undefined : Math.ceil(q / p);
  } catch {
    return undefined;
  }
}
