import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8")) as {
  version: string;
};

/** `hsm/<version>`, recorded in every store as `tool_version`. */
export const TOOL_VERSION = `hsm/${pkg.version}`;
export const VERSION = pkg.version;
