// The routes the control plane serves, read from its own routers (control-plane/resources.ts
// buildResources, as control-plane.ts mounts them), not from a hand-written list. Building the
// routers does no I/O: the services they close over are given inert dependencies, and no
// request is ever made.
import { buildResources, type ResourceContext } from '../../control-plane/resources.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import type { ControlPlaneConfig } from '../../control-plane/config.js';
import { silentLogger } from './silent-logger.js';

export interface ServedRoute {
  readonly method: string;
  /** The route template as registered, e.g. /api/v2/projects/:projectName/volumes/:uuid. */
  readonly path: string;
}

export function servedRoutes(): ServedRoute[] {
  // A client of an address nothing listens on: never used, closed at once.
  const etcd = createEtcdClient(['http://127.0.0.1:9']);
  const inert = new Proxy({}, { get: () => undefined }) as never;
  const config = { overcommitRatio: 1, volumePortMin: 20000, volumePortMax: 20001, apiHost: '127.0.0.1' } as Partial<ControlPlaneConfig> as ControlPlaneConfig;
  const ctx: ResourceContext = {
    etcd,
    cache: inert,
    auth: inert,
    election: inert,
    registry: inert,
    cluster: { UUID: '00000000-0000-4000-8000-000000000000', clusterName: 'routes', subsystemNQN: 'nqn.2016-01.io.strata:cluster:routes', supportedMaxReplicas: 3, createdAt: '', bootstrappedBy: '' },
    config,
    ports: { api: 8080, grpc: 8081 },
    sessions: inert,
    routing: inert,
    apiCaFile: undefined,
    hostSecretKey: inert,
    logger: silentLogger('served-routes'),
  };
  try {
    return buildResources(ctx).routers.flatMap((router) =>
      router.stack.flatMap((layer) => layer.methods.filter((m) => m !== 'HEAD').map((method) => ({ method, path: String(layer.path) }))),
    );
  } finally {
    etcd.close();
  }
}
