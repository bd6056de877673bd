/** The repository's files as the architecture tests walk them. */
import { readdirSync } from "node:fs";
import { join } from "node:path";

/** Every file under `dir`, at any depth, whose name matches `ending`. */
export function filesUnder(dir: string, ending: RegExp): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return filesUnder(path, ending);
    return ending.test(e.name) ? [path] : [];
  });
}
