// GET /api/v2/nvmeDevices and GET /api/v2/nvmeDevices/{Serial} (spec 4.9): cluster read.
// POST /api/v2/nvmeDevices {serialNumber, nodeUUID}: gives a device to a node (cluster write;
// If-Match: the device's ETag). POST /api/v2/nvmeDevices/{serialNumber} {serverUUID, ledPattern}:
// sets the device's LED through its server's agent (cluster write; If-Match: the device's ETag),
// forwarded to the control plane that holds the agent's session when it is not this one. Route pattern: params and body (400) → auth.require (401/403) →
// NvmeDevicesService. The serial path parameter arrives URL-encoded (serials may hold spaces and
// other characters); the router decodes it.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { answerForwarded, callerOf } from '../http/forwarding.js';
import { emptyAnswer, route } from '../http/routes.js';
import { attachNvmeDeviceBody, nvmeDeviceAnswer, nvmeDeviceListAnswer, nvmeDeviceListQuery, nvmeDeviceParams, nvmeDeviceReadParams, setNvmeDeviceLedBody, parseAttachNvmeDevice, parseNvmeDeviceListQuery, parseSetNvmeDeviceLed } from './nvme-devices-schema.js';
import type { NvmeDevicesService } from './nvme-devices-service.js';

export interface NvmeDevicesRoutesDeps {
  readonly auth: Authenticator;
  readonly devices: NvmeDevicesService;
}

export function createNvmeDevicesRoutes(deps: NvmeDevicesRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/nvmeDevices', { summary: 'List NVMe devices (spec 4.9)', query: nvmeDeviceListQuery, response: nvmeDeviceListAnswer }, async (ctx) => {
    const filters = parseNvmeDeviceListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { NvmeDevices: await deps.devices.list(filters) };
  });
  route(router, 'post', '/nvmeDevices', { summary: 'Add a device to a node (If-Match: the node\'s ETag)', body: attachNvmeDeviceBody, response: emptyAnswer }, async (ctx) => {
    const input = parseAttachNvmeDevice(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.devices.attach(input, ifMatch(ctx.headers));
    ctx.body = {};
  });
  route(router, 'post', '/nvmeDevices/:serial', { summary: 'Set a device\'s LED (If-Match: the device\'s ETag)', params: nvmeDeviceParams, body: setNvmeDeviceLedBody, response: emptyAnswer }, async (ctx) => {
    const body = await readJsonBody(ctx);
    const input = parseSetNvmeDeviceLed(ctx.params['serial'] ?? '', body);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const forwarded = await deps.devices.setLed(input, ifMatch(ctx.headers), callerOf(ctx, body));
    if (forwarded) answerForwarded(ctx, forwarded);
    else ctx.body = {};
  });
  route(router, 'get', '/nvmeDevices/:serial', { summary: 'One NVMe device', params: nvmeDeviceReadParams, malformedParamIsNotFound: 'NVMe device', response: nvmeDeviceAnswer }, async (ctx) => {
    const serial = ctx.params['serial'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.devices.get(serial);
  });
  return router;
}
