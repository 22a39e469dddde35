#!/usr/bin/env node
// `strata`: the admin CLI of a Strata cluster (docs/cli.md). Runs one command against the REST
// API and exits 0 ok, 1 API/request error, 2 usage error, 3 cannot connect (cli/errors.ts).
import { CommanderError } from 'commander';
import { CliError, ExitCode, redactSecrets } from './errors.js';
import { buildProgram } from './program.js';

// `strata … | head` closes the pipe early: that is the reader's choice, not an error to report.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(ExitCode.OK);
  throw err;
});

try {
  await buildProgram().parseAsync(process.argv.slice(2), { from: 'user' });
  process.exitCode = ExitCode.OK;
} catch (err) {
  process.exitCode = report(err);
}

/** One line on stderr (commander has already printed its own), and the exit status. */
function report(err: unknown): number {
  if (err instanceof CommanderError) {
    // --help and --version end "in error" only as far as commander's control flow goes.
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return ExitCode.OK;
    return ExitCode.USAGE;
  }
  if (err instanceof CliError) {
    process.stderr.write(`strata: ${redactSecrets(err.message)}\n`);
    return err.exitCode;
  }
  // A bug or an answer the CLI did not expect: say so without a stack trace unless asked.
  const detail = process.env['STRATA_DEBUG'] ? (err instanceof Error ? err.stack ?? err.message : String(err)) : err instanceof Error ? err.message : String(err);
  process.stderr.write(`strata: unexpected error: ${redactSecrets(detail)}\n`);
  return ExitCode.API_ERROR;
}
