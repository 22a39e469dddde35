// Where the API is and which token to send, from flags, environment and the default token file.
// Resolved only when a command runs, so `--help` works without a token. Nothing here prints the
// token; it is registered with errors.ts so no message can carry it either.
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { registerSecret, UsageError } from './errors.js';

/**
 * The control plane's default REST API port (apiPort in control-plane/config.ts). Repeated here,
 * not imported, so the CLI does not load the daemon's code; cli.test.ts checks they agree.
 */
export const DEFAULT_API_PORT = 8080;
export const DEFAULT_ENDPOINT = `https://127.0.0.1:${DEFAULT_API_PORT}`;

export interface ConnectionFlags {
  readonly endpoint?: string | undefined;
  readonly token?: string | undefined;
  readonly tokenFile?: string | undefined;
  readonly caFile?: string | undefined;
  readonly insecure?: boolean | undefined;
}

export interface Connection {
  /** http(s)://host[:port][/prefix], without /api/v2. */
  readonly endpoint: string;
  readonly token: string;
  /** How an https:// endpoint is verified. */
  readonly tls: { readonly ca?: string; readonly insecure: boolean };
}

export function defaultTokenFile(env: NodeJS.ProcessEnv = process.env): string {
  return join(env['HOME'] || homedir(), '.config', 'strata', 'token');
}

export function defaultCaFile(env: NodeJS.ProcessEnv = process.env): string {
  return join(env['HOME'] || homedir(), '.config', 'strata', 'ca.pem');
}

/**
 * Endpoint: --endpoint, else STRATA_ENDPOINT, else http://127.0.0.1:8080.
 * Token: --token, else --token-file, else STRATA_TOKEN, else ~/.config/strata/token if present.
 * CA (trusted besides the system's for https://): --ca-file, else STRATA_CA_FILE, else
 * ~/.config/strata/ca.pem if present. --insecure: no verification at all.
 */
export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): Connection {
  const endpoint = normalizeEndpoint(flags.endpoint ?? nonEmpty(env['STRATA_ENDPOINT']) ?? DEFAULT_ENDPOINT);
  if (flags.token !== undefined && flags.tokenFile !== undefined) throw new UsageError('give --token or --token-file, not both');

  let token: string | undefined;
  if (flags.token !== undefined) token = flags.token.trim();
  else if (flags.tokenFile !== undefined) token = readTokenFile(flags.tokenFile);
  else if (nonEmpty(env['STRATA_TOKEN']) !== undefined) token = env['STRATA_TOKEN']!.trim();
  else if (existsSync(defaultTokenFile(env))) token = readTokenFile(defaultTokenFile(env));

  if (token === undefined || token === '') {
    throw new UsageError(`no API token: pass --token-file FILE (or --token), set STRATA_TOKEN, or put the token in ${defaultTokenFile(env)}`);
  }
  registerSecret(token);
  // A character an HTTP header cannot carry would make fetch throw a message quoting the header.
  if (!/^[\x21-\x7e]+$/.test(token)) throw new UsageError('the API token contains whitespace or control characters; it must be one line');
  return { endpoint, token, tls: resolveTrust(flags, env) };
}

function resolveTrust(flags: ConnectionFlags, env: NodeJS.ProcessEnv): Connection['tls'] {
  const insecure = flags.insecure === true;
  const explicit = flags.caFile ?? nonEmpty(env['STRATA_CA_FILE']);
  if (insecure && flags.caFile !== undefined) throw new UsageError('give --ca-file or --insecure, not both');
  const path = explicit ?? (existsSync(defaultCaFile(env)) ? defaultCaFile(env) : undefined);
  if (path === undefined || insecure) return { insecure };
  let ca: string;
  try {
    ca = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read the CA file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (!ca.includes('-----BEGIN CERTIFICATE-----')) throw new UsageError(`the CA file ${path} holds no PEM certificate`);
  return { ca, insecure };
}

function readTokenFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read the token file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const token = text.trim();
  if (token === '') throw new UsageError(`the token file ${path} is empty`);
  return token;
}

/** Accepts host:port (https assumed) and a URL that already ends in /api/v2. */
export function normalizeEndpoint(raw: string): string {
  const text = raw.trim();
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `https://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new UsageError(`invalid endpoint "${raw}": use https://host:port`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`invalid endpoint "${raw}": only http:// and https:// are supported`);
  if (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    throw new UsageError(`invalid endpoint "${raw}": give only scheme, host, port (and a path prefix); the token goes in --token-file or STRATA_TOKEN`);
  }
  const prefix = url.pathname.replace(/\/+$/, '').replace(/\/api\/v2$/, '');
  return `${url.origin}${prefix}`;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}
