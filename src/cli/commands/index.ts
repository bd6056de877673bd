/** Every command, in the order `hsm --help` lists them; each adds itself to the program. */
import type { Command } from "commander";

import { adoptCommand } from "./adopt.js";
import { checkBankCommand } from "./check-bank.js";
import { compareCommand } from "./compare.js";
import { demoCommand } from "./demo.js";
import { exportCommand } from "./export.js";
import { extractCommand } from "./extract.js";
import { fixtureCommand } from "./fixture.js";
import { generateCommand } from "./generate.js";
import { inspectModelCommand } from "./inspect-model.js";
import { layersCommand } from "./layers.js";
import { makeModelCommand } from "./make-model.js";
import { mergeCommand } from "./merge.js";
import { metricsCommand } from "./metrics.js";
import { runCommand } from "./run.js";
import { reportCommand } from "./report.js";
import { scoreCommand } from "./score.js";
import { studyCommand } from "./study.js";
import { verifyCommand } from "./verify.js";

export const COMMANDS: readonly ((program: Command) => void)[] = [
  verifyCommand,
  inspectModelCommand,
  extractCommand,
  generateCommand,
  scoreCommand,
  exportCommand,
  mergeCommand,
  adoptCommand,
  metricsCommand,
  makeModelCommand,
  fixtureCommand,
  checkBankCommand,
  layersCommand,
  runCommand,
  studyCommand,
  compareCommand,
  reportCommand,
  demoCommand,
];
