// TLS of the agent's gRPC channel (docs/security.md): the control plane is verified against the
// cluster CA, read from etcd (which the agent already trusts) before every dial, so a CA created
// after the agent started, or a new one, is picked up. The name checked is the one every control
// plane's certificate carries (CONTROL_PLANE_TLS_NAME), not the dialed address: agents reach
// control planes through NAT and forwarded ports the certificate cannot name. A certificate the
// cluster CA did not sign fails the handshake, and the session dials the next endpoint.
import * as grpc from '@grpc/grpc-js';
import { CONTROL_PLANE_TLS_NAME } from '../../lib/tls/certificates.js';
import type { ClusterCaRecord } from '../../lib/tls/cluster-ca.js';

export const controlPlaneChannelOptions: grpc.ChannelOptions = {
  'grpc.ssl_target_name_override': CONTROL_PLANE_TLS_NAME,
  'grpc.default_authority': CONTROL_PLANE_TLS_NAME,
};

/** Channel credentials that trust only the cluster CA in etcd (read through lib/etcd/cluster-ca-store.ts's ClusterCaStore). */
export function clusterCaCredentials(store: { read(): Promise<ClusterCaRecord | null> }): () => Promise<grpc.ChannelCredentials> {
  return async () => {
    const ca = await store.read();
    if (!ca) throw new Error('the cluster has no CA in etcd yet (no control plane has started)');
    return grpc.credentials.createSsl(Buffer.from(ca.certificate));
  };
}
