import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8")) as {
  version: string;
};

/** How every `tool_version` hsm records begins: a manifest another tool wrote, to the contract, carries its own. */
export const TOOL_VERSION_PREFIX = "hsm/";
/** `hsm/<version>`, recorded in every store as `tool_version`. */
export const TOOL_VERSION = `${TOOL_VERSION_PREFIX}${pkg.version}`;
export const VERSION = pkg.version;
