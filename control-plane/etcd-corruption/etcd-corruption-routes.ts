// POST /api/v2/cluster/etcdCorruption/scan (spec 4.4): cluster write; the body is ignored; answers
// {} at once and the active cluster manager scans. GET /metrics: the last scan's result in
// Prometheus' text format, no authentication (like /healthz), served by every control plane.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import type { EtcdCorruptionService } from './etcd-corruption-service.js';

export interface EtcdCorruptionRoutesDeps {
  readonly auth: Authenticator;
  readonly etcdCorruption: EtcdCorruptionService;
}

export function createEtcdCorruptionRoutes(deps: EtcdCorruptionRoutesDeps): Router {
  const router = new Router();
  router.post('/api/v2/cluster/etcdCorruption/scan', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.etcdCorruption.requestScan();
    ctx.body = {};
  });
  router.get('/metrics', async (ctx) => {
    ctx.type = 'text/plain; version=0.0.4; charset=utf-8';
    ctx.body = await deps.etcdCorruption.metrics();
  });
  return router;
}
