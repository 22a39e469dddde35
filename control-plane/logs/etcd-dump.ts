// The diagnostic bundle's etcd dump: every key of the cluster's prefix at one revision, one JSON
// line each, read in pages (lib/etcd/key-dump.ts, the etcd driver) and written to a file as read
// (never the whole store in memory), with every secret redacted before it is written: the agent
// secret's HMAC keys, credentials' key material, and any field or value that is a secret by its
// name (secret, token, password, private key, ...) or by its shape (a PEM block, a JWT).
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import type { KeyDumpSource } from '../../lib/etcd/key-dump.js';

export const REDACTED = '<redacted>';

/** Field names whose string values are secrets wherever they appear. */
const SECRET_FIELD = /secret|token|passw|passphrase|private|jwt|chap|psk|payload|pem$|Key$|^key$/i;
const PEM_BLOCK = /-----BEGIN [A-Z0-9 ]+-----[\s\S]*?(-----END [A-Z0-9 ]+-----|$)/g;
const JWT = /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/g;

/** Fields kept as they are although SECRET_FIELD matches (labels, not secrets). */
function keptField(path: readonly string[]): boolean {
  // labelValueKeyPairs: [{key: 'FD', value: ...}] on nodes and volumes.
  return path.at(-1) === 'key' && path.includes('labelValueKeyPairs');
}

/** A value with every secret replaced by REDACTED. */
export function redact(value: unknown, path: readonly string[] = []): unknown {
  if (typeof value === 'string') {
    const field = path.at(-1) ?? '';
    if (field && SECRET_FIELD.test(field) && !keptField(path)) return REDACTED;
    return value.replace(PEM_BLOCK, REDACTED).replace(JWT, REDACTED);
  }
  // An array's elements are judged by the array's field name (tokens: ['…'] is redacted).
  if (Array.isArray(value)) return value.map((v) => redact(v, path));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, redact(v, [...path, k])]));
  }
  return value;
}

/** Writes the redacted dump of `source` (lib/etcd/key-dump.ts) to `file`; resolves with the revision and the number of keys. */
export async function writeEtcdDump(source: KeyDumpSource, file: string): Promise<{ revision: string; keys: number }> {
  const out = createWriteStream(file);
  let revision = '0';
  let count = 0;
  try {
    for await (const page of source.pages()) {
      if (revision === '0') {
        revision = page.revision;
        out.write(`${JSON.stringify({ dump: 'strata etcd keys', prefix: source.prefix, revision, redacted: 'secrets (agent secret keys, credentials key material, tokens, passwords, PEM blocks, JWTs) are replaced by <redacted>' })}\n`);
      }
      for (const kv of page.keys) {
        let value: unknown;
        try {
          value = JSON.parse(kv.value);
        } catch {
          value = kv.value;
        }
        const line = JSON.stringify({ key: kv.key, createRevision: kv.createRevision, modRevision: kv.modRevision, version: kv.version, lease: kv.lease, value: redact(value) });
        if (!out.write(`${line}\n`)) await once(out, 'drain');
        count += 1;
      }
    }
  } finally {
    out.end();
    await once(out, 'close');
  }
  return { revision, keys: count };
}
