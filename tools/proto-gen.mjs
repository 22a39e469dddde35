#!/usr/bin/env node
// Generates the typed gRPC stubs in proto/gen/ offline (no network): proto-loader-gen-types,
// then adds the `.js` extension to relative imports, as ESM with NodeNext resolution requires.
// Usage: node tools/proto-gen.mjs [outDir]   (default proto/gen; a test generates to a temp dir and diffs)
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = process.argv[2] ?? join(root, 'proto/gen');
const generator = join(root, 'node_modules/@grpc/proto-loader/build/bin/proto-loader-gen-types.js');

rmSync(outDir, { recursive: true, force: true });
execFileSync(process.execPath, [generator, '--grpcLib=@grpc/grpc-js', `--outDir=${outDir}`, '--keepCase',
  '--longs=String', '--enums=String', '--defaults', '--oneofs', 'proto/strata.proto'], { cwd: root, stdio: 'inherit' });

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (path.endsWith('.ts')) yield path;
  }
}
for (const file of files(outDir)) {
  const text = readFileSync(file, 'utf8').replace(/(from '\.{1,2}\/[^']+?)(?<!\.js)'/g, "$1.js'");
  writeFileSync(file, text);
}
