// What every command needs, built from the global options when the command runs.
import type { Command } from 'commander';
import { productVersion } from '../lib/paths.js';
import { ApiClient } from './api-client.js';
import { resolveConnection } from './connection.js';
import { createPrinter, type OutputFormat, type Printer } from './output.js';
import { parseDurationMs } from './units.js';

export interface GlobalOptions {
  endpoint?: string;
  token?: string;
  tokenFile?: string;
  caFile?: string;
  insecure?: boolean;
  output: OutputFormat;
  bytes?: boolean;
  timeout: string;
}

export interface CommandContext {
  readonly client: ApiClient;
  readonly print: Printer;
}

export function contextOf(command: Command): CommandContext {
  const options = command.optsWithGlobals<GlobalOptions>();
  const print = createPrinter(options.output, options.bytes === true);
  const connection = resolveConnection({ endpoint: options.endpoint, token: options.token, tokenFile: options.tokenFile, caFile: options.caFile, insecure: options.insecure });
  const client = new ApiClient({
    endpoint: connection.endpoint,
    token: connection.token,
    requestTimeoutMs: parseDurationMs(options.timeout, '--timeout'),
    onRetry: (message) => print.note(`strata: ${message}`),
    userAgent: `strata-cli/${productVersion}`,
    tls: connection.tls,
  });
  return { client, print };
}
