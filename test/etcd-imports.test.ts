// Only stores know etcd (issue 14, "Done when" first bullet): no shipped source imports the etcd
// client (`etcd3`, any of its subpaths, types included) or the key layout (`lib/etcd/keys`)
// unless it is
//   - a store: a file named `*-store.ts`, anywhere;
//   - under `lib/etcd/` (the client, keys, leases, the record store, the prefix mirror);
//   - a composition root (COMPOSITION_ROOTS): it makes the client and hands it to the stores.
// Services, routes, controllers and leader tasks take stores, never the client, and never build a
// key. Shipped sources are the .ts files under control-plane/, agent/, lib/ and cli/, tests
// (*.test.ts) excluded: tests, test/, tools/ and bench/ drive a real etcd from outside, as the
// integration layer does.
//
// The files that still do are listed in ALLOWED, each with why it is still there. The list only
// shrinks: a new importer fails, and so does an entry whose file no longer imports what it lists
// (remove the entry, or the module, from the list when a change takes the import away).
// Imports are read with TypeScript's own pre-processor (static, type-only, re-exports and dynamic
// imports; comments are not imports).
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { it } from 'node:test';
import ts from 'typescript';
import { packageRoot } from '../lib/paths.js';

const ROOTS = ['control-plane', 'agent', 'lib', 'cli'];

/** Where the process is wired: these make the etcd client and give it to the stores. */
const COMPOSITION_ROOTS = new Set(['control-plane/control-plane.ts', 'control-plane/resources.ts', 'agent/agent.ts']);

type Forbidden = 'etcd3' | 'keys';

/** Files that still import etcd or its keys outside the stores, and why (issue 14 items 1-3). */
const ALLOWED: Readonly<Record<string, { readonly imports: readonly Forbidden[]; readonly why: string }>> = {
};

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts') && !entry.name.endsWith('.d.ts')) yield path;
  }
}

const KEYS_MODULE = join(packageRoot, 'lib', 'etcd', 'keys');

/** What of etcd a source imports: the client (etcd3 or a subpath) and/or the key layout. */
function forbiddenImports(path: string): Forbidden[] {
  const found = new Set<Forbidden>();
  for (const { fileName } of ts.preProcessFile(readFileSync(path, 'utf8'), true, true).importedFiles) {
    if (fileName === 'etcd3' || fileName.startsWith('etcd3/')) found.add('etcd3');
    else if (fileName.startsWith('.') && join(dirname(path), fileName).replace(/\.[jt]s$/, '') === KEYS_MODULE) found.add('keys');
  }
  return [...found].sort();
}

function mayKnowEtcd(file: string): boolean {
  return file.endsWith('-store.ts') || file.startsWith('lib/etcd/') || COMPOSITION_ROOTS.has(file);
}

/** Every shipped source outside the stores and roots that imports etcd, with what it imports. */
function importers(): Map<string, Forbidden[]> {
  const found = new Map<string, Forbidden[]>();
  for (const root of ROOTS) {
    for (const path of sources(join(packageRoot, root))) {
      const file = relative(packageRoot, path).split(sep).join('/');
      if (mayKnowEtcd(file)) continue;
      const imports = forbiddenImports(path);
      if (imports.length > 0) found.set(file, imports);
    }
  }
  return found;
}

it('only stores, lib/etcd/ and the composition roots import the etcd client or lib/etcd/keys (the allow-list only shrinks)', () => {
  const found = importers();
  assert.ok(found.size > 0 || Object.keys(ALLOWED).length === 0, 'no importer found at all: is the scan reading the sources?');
  const problems: string[] = [];
  for (const [file, imports] of found) {
    const allowed = ALLOWED[file]?.imports ?? [];
    const extra = imports.filter((m) => !allowed.includes(m));
    if (extra.length > 0) problems.push(`${file} imports ${extra.join(' and ')}: go through a store (*-store.ts) instead`);
  }
  for (const [file, { imports, why }] of Object.entries(ALLOWED)) {
    assert.ok(why.length > 0, `${file}: an allowed importer says why it is still one`);
    const now = found.get(file) ?? [];
    const gone = imports.filter((m) => !now.includes(m));
    if (gone.length > 0) problems.push(`${file} no longer imports ${gone.join(' and ')}: take it off ALLOWED in test/etcd-imports.test.ts`);
  }
  assert.deepEqual(problems, [], problems.join('\n'));
});

it('every composition root the rule names exists (a stale name would hide a renamed root)', () => {
  for (const root of COMPOSITION_ROOTS) assert.ok(existsSync(join(packageRoot, root)), `${root} is gone: update COMPOSITION_ROOTS`);
});
