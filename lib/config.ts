// One validated, frozen configuration object per process, from file + environment + flags.
// Precedence (lowest to highest): built-in default < config file < environment < command-line flag.
// Every setting is flat and camelCase; its environment name is STRATA_<UPPER_SNAKE> and its
// flag is --kebab-case, so `--help` can list every setting with all three spellings.

import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { z } from 'zod';
import { StrataError } from './errors.js';

export interface SettingSpec<T = unknown> {
  /** What the setting does, shown by --help. */
  readonly description: string;
  /** Parses and validates the merged value (strings from env/flags are coerced by the schema). */
  readonly schema: z.ZodType<T>;
  /** Default shown by --help; undefined means required or optional-without-default (per schema). */
  readonly default?: T;
}

export type SettingsSpec = Record<string, SettingSpec>;
export type ConfigOf<S extends SettingsSpec> = {
  readonly [K in keyof S]: S[K] extends SettingSpec<infer T> ? T : never;
};

export const envNameOf = (key: string): string => `STRATA_${key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()}`;
export const flagNameOf = (key: string): string => key.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();

/** Reusable schemas for setting values that may arrive as strings (env, flags). */
export const settings = {
  port: () => z.coerce.number().int().min(0).max(65535),
  positiveInt: () => z.coerce.number().int().positive(),
  string: () => z.string().min(1),
  boolean: () =>
    z.union([z.boolean(), z.enum(['true', 'false', '1', '0', 'yes', 'no'])]).transform((v) =>
      typeof v === 'boolean' ? v : ['true', '1', 'yes'].includes(v),
    ),
  /** A list given as a JSON array (file) or a comma-separated string (env, flags). */
  list: () =>
    z
      .union([z.array(z.string()), z.string()])
      .transform((v) => (Array.isArray(v) ? v : v.split(',').map((s) => s.trim()).filter((s) => s.length > 0))),
  logLevel: () => z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
};

export interface LoadOptions {
  /** Program name for --help. */
  readonly program: string;
  readonly summary: string;
  readonly argv?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Builds the frozen config. Throws StrataError(CONFIG_INVALID) naming every bad setting and
 * where it came from; `--help` prints every setting and exits.
 */
export function loadConfig<S extends SettingsSpec>(spec: S, options: LoadOptions): ConfigOf<S> {
  const env = options.env ?? process.env;
  const command = new Command(options.program)
    .description(options.summary)
    .allowExcessArguments(false)
    .exitOverride()
    .addOption(new Option('--config <file>', 'JSON configuration file').env('STRATA_CONFIG'));
  for (const [key, setting] of Object.entries(spec)) {
    const shown = setting.default === undefined ? '' : ` (default: ${JSON.stringify(setting.default)})`;
    command.addOption(
      new Option(`--${flagNameOf(key)} <value>`, `${setting.description}${shown}  [env ${envNameOf(key)}]`),
    );
  }
  command.parse(options.argv ? [...options.argv] : process.argv.slice(2), { from: 'user' });
  const flags = command.opts<Record<string, string | undefined>>();

  const configFile = flags['config'] ?? env['STRATA_CONFIG'];
  let fromFile: Record<string, unknown> = {};
  if (configFile) {
    try {
      const parsed: unknown = JSON.parse(readFileSync(configFile, 'utf8'));
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not a JSON object');
      fromFile = parsed as Record<string, unknown>;
    } catch (err) {
      throw new StrataError('CONFIG_INVALID', `config file ${configFile}: ${(err as Error).message}`);
    }
    const unknownKeys = Object.keys(fromFile).filter((k) => !(k in spec));
    if (unknownKeys.length > 0) {
      throw new StrataError('CONFIG_INVALID', `config file ${configFile}: unknown settings ${unknownKeys.join(', ')}`);
    }
  }

  const result: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [key, setting] of Object.entries(spec)) {
    const flagValue = flags[key];
    const envValue = env[envNameOf(key)];
    let raw: unknown = setting.default;
    let source = 'default';
    if (key in fromFile) [raw, source] = [fromFile[key], `config file ${configFile}`];
    if (envValue !== undefined && envValue !== '') [raw, source] = [envValue, `env ${envNameOf(key)}`];
    if (flagValue !== undefined) [raw, source] = [flagValue, `flag --${flagNameOf(key)}`];
    const parsed = setting.schema.safeParse(raw);
    if (parsed.success) result[key] = parsed.data;
    else problems.push(`${key} (from ${source}): ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
  if (problems.length > 0) throw new StrataError('CONFIG_INVALID', `invalid configuration: ${problems.join(' | ')}`);
  return deepFreeze(result) as ConfigOf<S>;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/** Runs loadConfig for a daemon's main(): prints help or the config error and exits as CLIs do. */
export function loadConfigOrExit<S extends SettingsSpec>(spec: S, options: LoadOptions): ConfigOf<S> {
  try {
    return loadConfig(spec, options);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message: string };
    if (e.code === 'commander.helpDisplayed' || e.code === 'commander.help') process.exit(0);
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) process.exit(e.exitCode ?? 2);
    process.stderr.write(`${options.program}: ${e.message}\n`);
    process.exit(2);
  }
}
