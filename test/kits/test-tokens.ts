// Test support: a project credential (an RS256 key pair whose public half is stored as
// /strata/credentials/<project>/<name>) and tokens it signs, as a project admin would make.
import { generateKeyPairSync } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { CredentialRecord } from '../../lib/records.js';
import { importPrivateKey, signToken } from '../../control-plane/auth/tokens.js';

export async function projectToken(etcd: Etcd3, project: string, roles: string[]): Promise<string> {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const name = `test-${Math.random().toString(36).slice(2, 10)}`;
  const record: CredentialRecord = { project, name, type: 'RS256PubKey', payload: publicKey.export({ type: 'spki', format: 'pem' }).toString(), createdAt: new Date().toISOString() };
  await etcd.put(keys.credential(project, name)).value(JSON.stringify(record)).exec();
  const key = await importPrivateKey(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  return signToken(key, { kid: `${project}:${name}`, subject: 'test', roles, ttlSeconds: 3600 });
}
