// Cluster bootstrap: the first control plane to start on an empty etcd creates, in ONE etcd
// transaction guarded by "the cluster key does not exist", the cluster record, the built-in
// projects and the installation credential (system:root). However many instances start
// together, exactly one transaction succeeds.
//
// The root private key is written to a pending file BEFORE the transaction and renamed into
// place after it succeeds, so a crash in between loses nothing: on the next start, a pending
// key whose public half matches the stored system:root credential is finished; any other
// pending key (from an instance that lost the race) is deleted.
//
// The cluster CA (docs/security.md) is created in the same transaction, in etcd: a cluster never
// exists without it, and nothing of it is on local disk to finish after a crash. (A cluster
// bootstrapped before the CA existed gets one from lib/etcd/cluster-ca-store.ts's ensure.)
import { randomUUID, createPublicKey } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { exportPKCS8, exportSPKI, generateKeyPair } from 'jose';
import { writeFileAtomic } from '../../lib/files.js';
import { newClusterCa } from '../../lib/tls/cluster-ca.js';
import type { Logger } from '../../lib/logger.js';
import type { ClusterRecord, CredentialRecord, ProjectRecord } from '../../lib/records.js';
import { DEFAULT_PROJECT, ROLE_CLUSTER_ADMIN, SYSTEM_PROJECT } from '../auth/permissions.js';
import { importPrivateKey, signToken } from '../auth/tokens.js';
import type { BootstrapStore } from './bootstrap-store.js';

export const ROOT_CREDENTIAL = 'root';
export const ROOT_KEY_FILE = 'root-key.pem';
export const ADMIN_TOKEN_FILE = 'admin.jwt';
const PENDING_SUFFIX = '.pending';

export interface BootstrapOptions {
  readonly store: BootstrapStore;
  readonly logger: Logger;
  readonly instanceId: string;
  readonly clusterName: string;
  readonly subsystemNqnPrefix: string;
  readonly stateDir: string;
  readonly adminTokenTtlDays: number;
}

export interface BootstrapResult {
  readonly cluster: ClusterRecord;
  /** True when this instance created the cluster (and wrote the key and token files). */
  readonly created: boolean;
  /** Path of the admin token when this instance holds one. */
  readonly adminTokenPath: string | undefined;
}

export async function bootstrapCluster(options: BootstrapOptions): Promise<BootstrapResult> {
  const { store, logger, stateDir } = options;
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const keyPath = join(stateDir, ROOT_KEY_FILE);
  const pendingKeyPath = keyPath + PENDING_SUFFIX;
  const tokenPath = join(stateDir, ADMIN_TOKEN_FILE);

  const existing = await store.cluster();
  if (existing) {
    await finishPendingKey(options, pendingKeyPath, keyPath, tokenPath);
    logger.info({ clusterUUID: existing.UUID }, 'joined existing cluster');
    return { cluster: existing, created: false, adminTokenPath: existsSync(tokenPath) ? tokenPath : undefined };
  }

  const { publicKey, privateKey } = await generateKeyPair('RS256', { modulusLength: 2048, extractable: true });
  writeFileAtomic(pendingKeyPath, await exportPKCS8(privateKey), 0o600);

  const now = new Date().toISOString();
  const clusterUUID = randomUUID();
  const cluster: ClusterRecord = {
    UUID: clusterUUID,
    clusterName: options.clusterName,
    subsystemNQN: `${options.subsystemNqnPrefix}:cluster:${clusterUUID}`,
    supportedMaxReplicas: 3,
    createdAt: now,
    bootstrappedBy: options.instanceId,
  };
  const project = (name: string, description: string): ProjectRecord => ({
    UUID: randomUUID(), name, description, defaultPolicies: [], builtIn: true, createdAt: now,
  });
  const credential: CredentialRecord = {
    project: SYSTEM_PROJECT, name: ROOT_CREDENTIAL, type: 'RS256PubKey', payload: await exportSPKI(publicKey), createdAt: now,
  };

  const ca = await newClusterCa(clusterUUID);

  const created = await store.create({
    cluster,
    ca,
    bootstrap: { by: options.instanceId, at: now },
    projects: [project(DEFAULT_PROJECT, 'Default project'), project(SYSTEM_PROJECT, 'System project: installation credentials')],
    credential,
  });

  if (!created) {
    rmSync(pendingKeyPath, { force: true });
    const winner = await store.cluster();
    if (!winner) throw new Error('bootstrap lost the race but no cluster record exists');
    logger.info({ clusterUUID: winner.UUID }, 'another control plane bootstrapped the cluster; joined it');
    return { cluster: winner, created: false, adminTokenPath: existsSync(tokenPath) ? tokenPath : undefined };
  }

  await writeAdminToken(pendingKeyPath, tokenPath, options);
  renameSync(pendingKeyPath, keyPath);
  logger.info({ clusterUUID, adminTokenPath: tokenPath }, 'bootstrapped a new cluster');
  return { cluster, created: true, adminTokenPath: tokenPath };
}

async function writeAdminToken(privateKeyPath: string, tokenPath: string, options: BootstrapOptions): Promise<void> {
  const key = await importPrivateKey(readFileSync(privateKeyPath, 'utf8'));
  const token = await signToken(key, {
    kid: `${SYSTEM_PROJECT}:${ROOT_CREDENTIAL}`,
    subject: 'admin',
    roles: [ROLE_CLUSTER_ADMIN],
    ttlSeconds: options.adminTokenTtlDays * 86400,
  });
  writeFileAtomic(tokenPath, `${token}\n`, 0o600);
}

/** Completes a bootstrap that crashed after its transaction, or discards a losing key. */
async function finishPendingKey(options: BootstrapOptions, pendingKeyPath: string, keyPath: string, tokenPath: string): Promise<void> {
  if (!existsSync(pendingKeyPath)) return;
  const stored = await options.store.credential(SYSTEM_PROJECT, ROOT_CREDENTIAL);
  const pendingPublic = createPublicKey(readFileSync(pendingKeyPath, 'utf8')).export({ type: 'spki', format: 'pem' }).toString();
  if (stored && normalizePem(stored.payload) === normalizePem(pendingPublic)) {
    if (!existsSync(tokenPath)) await writeAdminToken(pendingKeyPath, tokenPath, options);
    renameSync(pendingKeyPath, keyPath);
    options.logger.info({ adminTokenPath: tokenPath }, 'finished an interrupted bootstrap');
  } else {
    rmSync(pendingKeyPath, { force: true });
  }
}

const normalizePem = (pem: string) => pem.replace(/\s+/g, '');
