/**
 * NumPy as an independent reference. Tests that need it skip when it is absent,
 * unless HSM_REQUIRE_NUMPY=1 (as in CI), where its absence is a failure.
 */
import { spawnSync } from "node:child_process";

export const PYTHON = process.env.HSM_PYTHON ?? "/usr/bin/python3";
export const numpyRequired = process.env.HSM_REQUIRE_NUMPY === "1";
export const hasNumpy = spawnSync(PYTHON, ["-c", "import numpy"], { stdio: "ignore" }).status === 0;
/** Python itself, for the tests that need only its standard library (unicodedata, str.casefold). */
export const hasPython = spawnSync(PYTHON, ["-c", "pass"], { stdio: "ignore" }).status === 0;
/** scikit-learn, for the tests that compare with an independent NumPy + scikit-learn implementation. */
export const hasSklearn = hasNumpy && spawnSync(PYTHON, ["-c", "import sklearn"], { stdio: "ignore" }).status === 0;

if (numpyRequired && !hasSklearn) {
  throw new Error(
    `HSM_REQUIRE_NUMPY=1 but ${PYTHON} cannot import numpy and sklearn (apt-get install python3-numpy python3-sklearn)`,
  );
}

/** Runs a Python snippet with `args` as sys.argv[1:]; returns stdout, throws with stderr on failure. */
export function python(code: string, ...args: string[]): string {
  const r = spawnSync(PYTHON, ["-c", code, ...args], { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`python failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}
