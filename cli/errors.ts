// What can go wrong in the CLI, and the exit status each failure gives. Scripts branch on the
// status, so it is part of the interface (docs/cli.md):
//   0 ok, 1 the API refused or the operation did not finish (4xx/5xx, a --wait that timed out or
//   ended Failed), 2 usage (bad flags, sizes, identifiers, no token), 3 the API cannot be reached.

export const ExitCode = {
  OK: 0,
  API_ERROR: 1,
  USAGE: 2,
  CANNOT_CONNECT: 3,
} as const;
export type ExitCodeNumber = (typeof ExitCode)[keyof typeof ExitCode];

export abstract class CliError extends Error {
  abstract readonly exitCode: ExitCodeNumber;

  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The command line itself is wrong: nothing was sent. */
export class UsageError extends CliError {
  readonly exitCode = ExitCode.USAGE;
}

/** The API answered with an error status (its JSON error body, wire-conventions §3). */
export class ApiError extends CliError {
  readonly exitCode = ExitCode.API_ERROR;
  constructor(
    message: string,
    readonly status: number,
    /** gRPC status code from the error body; undefined when the body was not the API's. */
    readonly grpcCode: number | undefined,
    /** Seconds from a Retry-After header, when the server sent one. */
    readonly retryAfterSeconds: number | undefined,
  ) {
    super(message);
  }
}

/** No HTTP answer at all: refused, unresolvable, reset, TLS failure or timed out. */
export class ConnectionError extends CliError {
  readonly exitCode = ExitCode.CANNOT_CONNECT;
}

/**
 * The API accepted every request, but the operation did not reach what the user asked for: a
 * --wait that timed out or saw the volume go Failed, an ACL change the CLI will not make.
 */
export class OperationError extends CliError {
  readonly exitCode = ExitCode.API_ERROR;
}

// The token must never reach the terminal or a log: every message printed goes through
// redactSecrets, which replaces the secrets registered here (the token, once it is known).
const secrets = new Set<string>();

export function registerSecret(secret: string): void {
  if (secret.length >= 4) secrets.add(secret);
}

export function redactSecrets(text: string): string {
  let redacted = text;
  for (const secret of secrets) redacted = redacted.split(secret).join('<token>');
  return redacted;
}
