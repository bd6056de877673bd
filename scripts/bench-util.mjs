// Shared by the benchmark scripts: medians, a command's wall time and peak
// memory, and the tolerances two implementations of a metric must agree within.
import { spawnSync } from "node:child_process";

export const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

/** Runs `cmd args` under /usr/bin/time: wall seconds, peak resident memory (MB) and stdout. `env` replaces the environment. */
export function timed(cmd, args, env = process.env) {
  const r = spawnSync("/usr/bin/time", ["-f", "%e %M", cmd, ...args], { encoding: "utf8", maxBuffer: 1 << 26, env });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stderr}`);
  const [secs, kb] = r.stderr.trim().split("\n").at(-1).split(" ").map(Number);
  return { secs, mb: kb / 1024, stdout: r.stdout };
}

/** The environment without the given variables. */
export function envWithout(...names) {
  const env = { ...process.env };
  for (const n of names) delete env[n];
  return env;
}

// metrics.md's tolerances for agreement between implementations.
const POINT = { iss: 1e-4, own_cos: 1e-4, other_cos: 1e-4, auroc: 5e-3, kts: 2e-2 };
const EXACT = ["n_queries", "n_facts", "n_correct", "excluded_nonfinite", "skipped_no_anchor"];
// Exact except for rows whose own score is within 1e-6 of a competitor's, which neither side reports.
const RANKS = ["r_at_1", "mrr"];

/**
 * Compares two implementations' rows (matched on layer and family) field by
 * field: the largest deviation of each field, and the fields outside the
 * tolerance. Intervals are held to max(0.02, 0.15 × the first side's width).
 */
export function agreement(mine, peer) {
  const key = (r) => `${r.layer}/${r.family}`;
  const peerRows = new Map(peer.map((r) => [key(r), r]));
  const maxDev = {};
  const failures = [];
  const note = (field, dev, ok, row) => {
    maxDev[field] = Math.max(maxDev[field] ?? 0, dev);
    if (!ok) failures.push(`${key(row)} ${field}: ${row[field]} vs ${peerRows.get(key(row))[field]}`);
  };
  for (const m of mine) {
    const p = peerRows.get(key(m));
    if (!p) {
      failures.push(`${key(m)}: missing from the peer`);
      continue;
    }
    for (const field of Object.keys(m)) {
      if (!(field in p) || typeof m[field] === "string" || field === "layer") continue;
      const a = m[field];
      const b = p[field];
      if (a === null || b === null) {
        note(field, 0, a === b, m);
        continue;
      }
      const dev = Math.abs(a - b);
      const ci = /^(.*)_ci_(low|high)$/.exec(field);
      if (ci) note(field, dev, dev <= Math.max(0.02, 0.15 * (m[`${ci[1]}_ci_high`] - m[`${ci[1]}_ci_low`])), m);
      else if (field in POINT) note(field, dev, dev <= POINT[field], m);
      else if (EXACT.includes(field)) note(field, dev, dev === 0, m);
      else if (RANKS.includes(field)) note(field, dev, true, m);
    }
  }
  return { rows: mine.length, maxDev, failures };
}
