// This control plane's TLS (docs/security.md): the cluster CA from etcd (created with the
// cluster, or here for a cluster bootstrapped before it existed), a certificate it issues itself
// at every start for its API endpoints and the name agents verify, the CA certificate written to
// <stateDir>/ca.pem for local clients (the launcher, the CLI), and the REST API's certificate:
// the operator's own (tlsCert/tlsKey) when given, else the issued one, none with the explicit
// development setting apiInsecureHttp. The agents' gRPC port always uses the issued certificate:
// agents verify it against the cluster CA.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { StrataError } from '../../lib/errors.js';
import { writeFileAtomic } from '../../lib/files.js';
import { CONTROL_PLANE_TLS_NAME, checkPair, issueServerCertificate, type CertificateAndKey } from '../../lib/tls/certificates.js';
import type { ClusterCaStore } from '../../lib/etcd/cluster-ca-store.js';
import { newClusterCa } from '../../lib/tls/cluster-ca.js';
import type { ControlPlaneConfig } from '../config.js';

export const CA_FILE = 'ca.pem';

export interface ControlPlaneTls {
  /** Path of the cluster CA certificate in the state directory. */
  readonly caPath: string;
  /** The REST API's certificate and key; undefined: plain HTTP (apiInsecureHttp). */
  readonly rest: { readonly cert: Buffer; readonly key: Buffer } | undefined;
  /** File a local client verifies the REST API with (the operator's certificate or the cluster CA). */
  readonly restCaFile: string | undefined;
  readonly grpc: grpc.ServerCredentials;
}

const unspecified = new Set(['', '0.0.0.0', '::', '[::]']);

/** The names this instance's certificate is issued for: every address it may be reached at. */
export function certificateNames(config: ControlPlaneConfig): string[] {
  const names = [CONTROL_PLANE_TLS_NAME, 'localhost', '127.0.0.1', '::1', hostname(), config.advertiseAddress, config.apiHost, config.grpcHost, ...config.tlsNames];
  return [...new Set(names.map((n) => n.replace(/^\[(.*)\]$/, '$1')).filter((n) => !unspecified.has(n) && (isIP(n) !== 0 || /^[A-Za-z0-9*.-]+$/.test(n))))];
}

export async function prepareControlPlaneTls(config: ControlPlaneConfig, caStore: ClusterCaStore, clusterUUID: string, instanceId: string): Promise<ControlPlaneTls> {
  if (Boolean(config.tlsCert) !== Boolean(config.tlsKey)) {
    throw new StrataError('CONFIG_INVALID', 'tlsCert and tlsKey must be given together');
  }
  const ca = await caStore.ensure(() => newClusterCa(clusterUUID));
  const caPath = join(config.stateDir, CA_FILE);
  writeFileAtomic(caPath, ca.certificate, 0o644);
  const issued = await issueServerCertificate(ca, `control plane ${instanceId}`, certificateNames(config));
  const pem = (pair: CertificateAndKey) => ({ cert: Buffer.from(pair.certificate), key: Buffer.from(pair.privateKey) });
  let rest: ControlPlaneTls['rest'] = pem(issued);
  let restCaFile: string | undefined = caPath;
  if (config.apiInsecureHttp) {
    rest = undefined;
    restCaFile = undefined;
  } else if (config.tlsCert && config.tlsKey) {
    const own = { certificate: readFileSync(config.tlsCert, 'utf8'), privateKey: readFileSync(config.tlsKey, 'utf8') };
    try {
      checkPair(own, 'tlsCert/tlsKey');
    } catch (err) {
      throw new StrataError('CONFIG_INVALID', (err as Error).message);
    }
    rest = pem(own);
    restCaFile = config.tlsCert;
  }
  return {
    caPath,
    rest,
    restCaFile,
    grpc: grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(issued.certificate), private_key: Buffer.from(issued.privateKey) }], false),
  };
}
