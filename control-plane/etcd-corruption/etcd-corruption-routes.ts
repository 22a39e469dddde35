// POST /api/v2/cluster/etcdCorruption/scan (spec 4.4): cluster write; the body is ignored; answers
// {} at once and the active cluster manager scans. The last scan's result is a metric of every
// control plane, on its metrics address (control-plane/metrics/), not on the REST API.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { emptyAnswer, route } from '../http/routes.js';
import type { EtcdCorruptionService } from './etcd-corruption-service.js';

export interface EtcdCorruptionRoutesDeps {
  readonly auth: Authenticator;
  readonly etcdCorruption: EtcdCorruptionService;
}

export function createEtcdCorruptionRoutes(deps: EtcdCorruptionRoutesDeps): Router {
  const router = new Router();
  route(router, 'post', '/api/v2/cluster/etcdCorruption/scan', { summary: 'Start an etcd corruption scan (the body is ignored)', response: emptyAnswer }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.etcdCorruption.requestScan();
    ctx.body = {};
  });
  return router;
}
