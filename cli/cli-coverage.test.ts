// The CLI covers the API: every route family the control plane serves under /api/v2 (read from
// its own routers) has a command in docs/cli.md's command table, by method; every command that
// table lists exists in the CLI, and every command of the CLI is listed there. The bash completion
// the real binary prints completes the command tree (sourced and run in bash).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { Command } from 'commander';
import { packageRoot } from '../lib/paths.js';
import { servedRoutes } from '../test/helpers/served-routes.js';
import { buildProgram } from './program.js';

const CLI = join(packageRoot, 'dist', 'cli', 'main.js');

/** "GET volumes/rollback": the method and the path's fixed segments; project-scoped paths as unscoped ones. */
export function familyOf(method: string, path: string): string {
  const segments = path
    .replace(/\?.*$/, '')
    .replace(/^\/api\/v2/, '')
    .split('/')
    .filter((s) => s !== '' && !s.startsWith(':') && !/^\{.*\}$/.test(s) && !/^[A-Z]+$/.test(s));
  if (segments[0] === 'projects' && segments.length > 1) segments.shift();
  return `${method} ${segments.join('/')}`;
}

/** Expands "a|b" alternatives in each space-separated word: "acl add|remove" → ["acl add", "acl remove"]. */
function expand(words: readonly string[]): string[] {
  return words.reduce<string[]>((acc, word) => acc.flatMap((prefix) => word.split('|').map((alt) => (prefix ? `${prefix} ${alt}` : alt))), ['']);
}

interface DocRow {
  readonly commands: string[];
  readonly families: string[];
}

/** docs/cli.md's command table: each row's command paths and the route families its API column names. */
function documentedRows(): DocRow[] {
  const text = readFileSync(join(packageRoot, 'docs', 'cli.md'), 'utf8');
  const section = text.slice(text.indexOf('## Commands'), text.indexOf('**Naming a volume or snapshot**'));
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => {
      const cells = line.replace(/\\\|/g, '\u0000').split('|').map((c) => c.replace(/\u0000/g, '|').trim());
      const usage = /^`([^`]*)`/.exec(cells[1]!)![1]!;
      const words: string[] = [];
      for (const token of usage.split(/\s+/)) {
        if (!/^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$/.test(token)) break;
        words.push(token);
      }
      const families = [...cells[2]!.matchAll(/\b((?:GET|POST|PUT|DELETE)(?:\|(?:GET|POST|PUT|DELETE))*) (\/[^\s`]*)/g)].flatMap(([, methods, path]) =>
        methods!.split('|').flatMap((method) => expand(path!.split('/')).map((p) => familyOf(method, p.replace(/ /g, '/')))),
      );
      return { commands: expand(words), families };
    });
}

/** Every runnable command of the CLI as a path ("volumes acl add"). */
function leafCommands(command: Command, prefix = ''): string[] {
  const subcommands = command.commands.filter((c) => c.name() !== 'help');
  if (subcommands.length === 0) return [prefix];
  return subcommands.flatMap((c) => leafCommands(c, prefix ? `${prefix} ${c.name()}` : c.name()));
}

/** The host test sources (not the QEMU suites, which CI runs apart): where the real binary is run. */
function hostTestSources(dir = packageRoot): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return ['node_modules', 'dist', '.git', 'e2e'].includes(entry.name) ? [] : hostTestSources(path);
    return entry.name.endsWith('.test.ts') ? [readFileSync(path, 'utf8')] : [];
  });
}

describe('the CLI covers the API', () => {
  const rows = documentedRows();
  const documentedFamilies = new Set(rows.flatMap((r) => r.families));

  it('every route family served under /api/v2 has a command in docs/cli.md, by method', () => {
    const served = servedRoutes();
    assert.ok(served.length > 50, `routes read from the routers: ${served.length}`);
    const families = [...new Set(served.filter((r) => r.path.startsWith('/api/v2/')).map((r) => familyOf(r.method, r.path)))].sort();
    assert.ok(families.includes('PUT volumes/rollback') && families.includes('POST nvmeDevices'), families.join(', '));
    const missing = families.filter((f) => !documentedFamilies.has(f));
    assert.deepEqual(missing, [], `served route families with no command in docs/cli.md: ${missing.join(', ')}`);
    // And the table names no route the control plane does not serve.
    const unserved = [...documentedFamilies].filter((f) => !families.includes(f));
    assert.deepEqual(unserved, [], `docs/cli.md names routes that are not served: ${unserved.join(', ')}`);
  });

  it('docs/cli.md lists every command of the CLI, and only those', () => {
    const cli = leafCommands(buildProgram()).sort();
    const documented = [...new Set(rows.flatMap((r) => r.commands))].sort();
    assert.deepEqual(documented, cli);
  });

  it('every command of the CLI is run by a host test (its words as the arguments of the real binary)', () => {
    const sources = hostTestSources();
    const escape = (word: string) => word.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const unrun = leafCommands(buildProgram()).filter((path) => {
      const words = path.split(' ').map((w) => `'${escape(w)}'`);
      const invocation = new RegExp(words.length === 1 ? `\\[\\s*${words[0]}[,\\]]` : words.join(',\\s*'));
      return !sources.some((source) => invocation.test(source));
    });
    assert.deepEqual(unrun, [], `commands no host test runs: ${unrun.join(', ')}`);
  });

  it('strata completion bash, sourced in bash, completes commands, subcommands, options and --output values', (t) => {
    const after = (fn: () => void) => t.after(fn);
    // The script as the real binary prints it, sourced by bash for each completion.
    const dir = mkdtempSync(join(tmpdir(), 'strata-completion-'));
    const script = join(dir, 'strata.bash');
    writeFileSync(script, execFileSync(process.execPath, [CLI, 'completion', 'bash'], { encoding: 'utf8' }));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const complete = (...words: string[]) =>
      execFileSync('bash', ['-c', `source "${script}" && COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}) && COMP_CWORD=${words.length - 1} && _strata && echo "\${COMPREPLY[*]}" && complete -p strata`], { encoding: 'utf8' })
        .trim()
        .split('\n');
    const [volumes, registered] = complete('strata', 'vol');
    assert.equal(volumes, 'volumes');
    assert.equal(registered, 'complete -F _strata strata');
    assert.deepEqual(complete('strata', 'volumes', 'c')[0]!.split(' ').sort(), ['clone', 'connect-info', 'create']);
    assert.deepEqual(complete('strata', '--output', 'json', 'volumes', 'create', '--p')[0]!.split(' ').sort(), ['--policy', '--project']);
    assert.equal(complete('strata', 'policies', 'create', '--write-iops-')[0], '--write-iops-per-gb');
    assert.equal(complete('strata', '-o', 'j')[0], 'json');
    // Every command path of the CLI completes to itself.
    for (const path of leafCommands(buildProgram())) {
      const words = path.split(' ');
      const last = words.pop()!;
      assert.ok(complete('strata', ...words, last)[0]!.split(' ').includes(last), `completion of "${path}"`);
    }
  });
});
