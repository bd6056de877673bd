/**
 * The export formats `hsm export --format` offers, in the order its help lists
 * them. A format is one registered unit (src/export/formats/format.ts): adding
 * one touches its own file, the registration below, its docs and its tests
 * (docs/contributing.md walks through it).
 */
import { EEE } from "./eee.js";
import { registerExportFormat, type ExportFormatRegistry } from "./format.js";
import { FOUNDRY } from "./foundry.js";

export { registerExportFormat, type ExportFormatRegistry } from "./format.js";

/** The built-in export formats. */
export const EXPORT_FORMATS: ExportFormatRegistry = registerExportFormat(registerExportFormat([], EEE), FOUNDRY);
