/**
 * The command line: builds the program from the command list and turns errors
 * into exit statuses. Each command (commands/) declares its options, calls one
 * library function and prints.
 */
import { Command, CommanderError } from "commander";

import { EXIT, HsmError } from "../errors.js";
import { VERSION } from "../version.js";
import type { AddCommand, Registries } from "./commands/index.js";

/**
 * The commands to build: all of them, except for `hsm verify` and `hsm
 * metrics`, which load only their own (start-up is a visible share of
 * verifying a store or computing KTS, and no other command's modules are
 * needed to parse their command lines or print their help).
 */
async function commandsFor(argv: string[]): Promise<readonly AddCommand[]> {
  if (argv[2] === "verify") return [(await import("./commands/verify.js")).verifyCommand];
  if (argv[2] === "metrics") return [(await import("./commands/metrics.js")).metricsCommand];
  return (await import("./commands/index.js")).COMMANDS;
}

/**
 * The registries behind the options and help of the command named (`hsm X …`
 * or `hsm help X`): `hsm metrics` lists the metric registry, `hsm export` the
 * export formats, and the program's own help both in their summaries. Every
 * other command gets them empty, and never reaches those options: loading the
 * metrics would only slow its start.
 */
async function registriesFor(command: string | undefined): Promise<Registries> {
  const help = command === undefined || command.startsWith("-");
  if (!help && command !== "metrics" && command !== "export") return { metrics: [], exportFormats: [] };
  // The library's entry point, loaded only here: `hsm verify` needs none of it.
  const { exportFormatRegistry, metricRegistry } = await import("../index.js");
  const [metrics, exportFormats] = await Promise.all([
    help || command === "metrics" ? metricRegistry() : [],
    help || command === "export" ? exportFormatRegistry() : [],
  ]);
  return { metrics, exportFormats };
}

/** Whether `name` is one of the program's commands (or an alias of one). */
function isCommand(program: Command, name: string): boolean {
  return program.commands.some((c) => c.name() === name || c.aliases().includes(name));
}

function buildProgram(commands: readonly AddCommand[], registries: Registries): Command {
  const program = new Command("hsm")
    .description(
      "Hidden-state metrics: run a decoder model (ONNX) over a bank of short factual questions — greedy answers, " +
        "scoring, and the last-token hidden states of its upper layers as float16 .npy stores with a checksummed " +
        "index.json — verify stores, measure ISS and KTS over them, and export to Every Eval Ever and Foundry.",
    )
    .addHelpText(
      "after",
      "\nStart with `hsm demo`. For a model: `hsm run --model-dir DIR --bank BANK` does every step;\n" +
        "generate, score, extract, verify, metrics and export run them one by one.",
    )
    .version(VERSION)
    .showHelpAfterError("(run with --help for usage)")
    .configureHelp({ sortSubcommands: false });
  for (const add of commands) add(program, registries);
  return program;
}

const SHOWN = new Set(["commander.helpDisplayed", "commander.version", "commander.help"]);

/**
 * The exit status for an error: commander's own (0 after help, 2 for a bad
 * command line), an HsmError's (data 1, usage 2), and 3 for anything unexpected,
 * which is a bug in hsm and is reported as one.
 */
export function exitStatusFor(err: unknown): number {
  if (err instanceof CommanderError) return SHOWN.has(err.code) ? EXIT.ok : EXIT.usage;
  if (err instanceof HsmError) {
    process.stderr.write(`hsm: ${err.message}\n`);
    return err.exitCode;
  }
  const e = err instanceof Error ? err : new Error(String(err));
  process.stderr.write(`hsm: unexpected error: ${e.message}\n`);
  process.stderr.write(process.env.HSM_DEBUG ? `${e.stack}\n` : "(set HSM_DEBUG=1 for a stack trace)\n");
  return EXIT.internal;
}

/** Runs the CLI on `argv` (as process.argv); returns the exit status. */
export async function run(argv: string[]): Promise<number> {
  // `hsm help X` (or `hsm help help X`) names X.
  let helps = 0;
  while (argv[2 + helps] === "help") helps++;
  const command = argv[2 + helps];
  const [commands, registries] = await Promise.all([commandsFor(argv), registriesFor(command)]);
  let program = buildProgram(commands, registries);
  // A word that is no command gets the program's help (with --help) or an error that points to it: with the registries.
  if (command !== undefined && !isCommand(program, command)) {
    program = buildProgram(commands, await registriesFor(undefined));
    // `hsm help X` for no command X is the usage error `hsm X` is, not the program's help and success.
    argv = [...argv.slice(0, 2), ...argv.slice(2 + helps)];
  }
  program.exitOverride();
  for (const cmd of program.commands) cmd.exitOverride();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === "number" ? process.exitCode : EXIT.ok;
  } catch (err) {
    return exitStatusFor(err);
  }
}
