// Shared by the benchmark scripts: medians, and a command's wall time and peak memory.
import { spawnSync } from "node:child_process";

export const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

/** Runs `cmd args` under /usr/bin/time: wall seconds and peak resident memory (MB). */
export function timed(cmd, args) {
  const r = spawnSync("/usr/bin/time", ["-f", "%e %M", cmd, ...args], { encoding: "utf8", maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stderr}`);
  const [secs, kb] = r.stderr.trim().split("\n").at(-1).split(" ").map(Number);
  return { secs, mb: kb / 1024 };
}
