// The cluster CA (/strata/cluster-ca): the certificate every REST client and agent verifies
// control planes against, and its private key, with which every control plane issues its own
// certificate at start. Kept in etcd by lib/etcd/cluster-ca-store.ts (created in the bootstrap
// transaction, or by the first control plane that finds none; the same trust root as
// /strata/agent-secret: whoever reads etcd is trusted; docs/security.md).
import { createCertificateAuthority, type CertificateAndKey } from './certificates.js';

export interface ClusterCaRecord extends CertificateAndKey {
  readonly createdAt: string;
}

/** A new CA record for `clusterUUID` (not stored). */
export async function newClusterCa(clusterUUID: string): Promise<ClusterCaRecord> {
  return { ...(await createCertificateAuthority(clusterUUID)), createdAt: new Date().toISOString() };
}
