/**
 * Every command, in the order `hsm --help` lists them; each adds itself to the
 * program. Commands whose options list registered entries (`metrics`: the
 * metrics; `export`: the formats) build them, and their help, from the
 * registries they are given.
 */
import type { Command } from "commander";

import type { Registries } from "../options.js";

import { adoptCommand } from "./adopt.js";
import { checkBankCommand } from "./check-bank.js";
import { compareCommand } from "./compare.js";
import { demoCommand } from "./demo.js";
import { doctorCommand } from "./doctor.js";
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

export type { Registries };

/** Adds one command to the program. */
export type AddCommand = (program: Command, registries: Registries) => void;

export const COMMANDS: readonly AddCommand[] = [
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
  doctorCommand,
];
