// The cluster CA in etcd (/strata/cluster-ca): the certificate every REST client and agent
// verifies control planes against, and its private key, with which every control plane issues
// its own certificate at start. Created in the bootstrap transaction; a cluster bootstrapped
// before the CA existed gets one from the first control plane that finds none, in a
// `create_revision == 0` transaction, so racing creators agree (the same trust root as
// /strata/agent-secret: whoever reads etcd is trusted; docs/security.md).
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../etcd/client.js';
import { keys } from '../etcd/keys.js';
import { createCertificateAuthority, type CertificateAndKey } from './certificates.js';

export interface ClusterCaRecord extends CertificateAndKey {
  readonly createdAt: string;
}

export async function readClusterCa(etcd: Etcd3): Promise<ClusterCaRecord | null> {
  return parseRecord<ClusterCaRecord>(keys.clusterCa(), await etcd.get(keys.clusterCa()).string());
}

/** A new CA record for `clusterUUID` (not stored). */
export async function newClusterCa(clusterUUID: string): Promise<ClusterCaRecord> {
  return { ...(await createCertificateAuthority(clusterUUID)), createdAt: new Date().toISOString() };
}

/** The stored CA, creating it when the cluster has none. */
export async function ensureClusterCa(etcd: Etcd3, clusterUUID: string): Promise<ClusterCaRecord> {
  const existing = await readClusterCa(etcd);
  if (existing) return existing;
  const created = await newClusterCa(clusterUUID);
  await etcd.if(keys.clusterCa(), 'Create', '==', 0).then(etcd.put(keys.clusterCa()).value(JSON.stringify(created))).commit();
  const stored = await readClusterCa(etcd);
  if (!stored) throw new Error('the cluster CA vanished right after it was created');
  return stored;
}
