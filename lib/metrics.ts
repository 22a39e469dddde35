// Prometheus metrics: one registry per process (the control plane's and the agent's metrics
// register in it when their modules load), served in the text format on an address of its own
// (settings metricsHost / metricsPort, docs/install.md "Metrics"). Names follow Prometheus'
// conventions: `strata_` prefix, base units (seconds, bytes), `_total` on counters. No label
// takes unbounded values: routes are templates, never a volume UUID.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { StrataError } from './errors.js';
import { answerClientError, writeError } from './http-errors.js';
import type { Logger } from './logger.js';

export const registry = new Registry();
// process_cpu_seconds_total, process_resident_memory_bytes, nodejs_eventloop_lag_seconds, …
collectDefaultMetrics({ register: registry });
// prom-client also exports these gauges with a `_total` suffix, which Prometheus reserves for
// counters (promtool check metrics refuses them); their per-type twins without it stay.
for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name);

/** Buckets (seconds) for work from a millisecond to a minute: API calls, etcd requests, passes. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = [], collect?: (this: Counter<L>) => void | Promise<void>) =>
  new Counter<L>({ name, help, labelNames, registers: [registry], ...(collect ? { collect } : {}) });
export const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[] = [], collect?: (this: Gauge<L>) => void | Promise<void>) =>
  new Gauge<L>({ name, help, labelNames, registers: [registry], ...(collect ? { collect } : {}) });
export const histogram = <L extends string>(name: string, help: string, labelNames: readonly L[] = [], buckets = LATENCY_BUCKETS) =>
  new Histogram<L>({ name, help, labelNames, buckets, registers: [registry] });

/** Seconds since a process.hrtime.bigint() reading. */
export const secondsSince = (started: bigint): number => Number(process.hrtime.bigint() - started) / 1e9;

// ---- etcd (both daemons talk to it through lib/etcd/client.ts) ----

export const etcdRequestDuration = histogram(
  'strata_etcd_request_duration_seconds',
  'Latency of unary etcd requests (ranges, puts, transactions, lease calls) including retries, by result',
  ['result'],
);
for (const result of ['ok', 'error']) etcdRequestDuration.labels(result);

export interface MetricsServer {
  readonly port: number | undefined;
  close(): Promise<void>;
}

/**
 * Serves GET /metrics on host:port (0: any free port). A port that cannot be taken is logged as
 * an error and the daemon goes on without metrics (port undefined), as the discovery controller
 * does: monitoring must not keep storage from being served.
 */
export async function startMetricsServer(host: string, port: number, logger: Logger): Promise<MetricsServer> {
  // Errors carry the JSON error body, as every error the daemons send (lib/http-errors.ts); the
  // scrape itself is Prometheus' text format. Host is not required, as on the REST API.
  const server: Server = createServer({ requireHostHeader: false }, (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      writeError(res, new StrataError('ROUTE_NOT_FOUND', `no route for ${req.method} ${path}: only GET /metrics is served here`));
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(req.method === 'HEAD' ? undefined : text),
      (err: unknown) => {
        logger.error({ err }, 'collecting metrics failed');
        writeError(res, new StrataError('INTERNAL', `collecting metrics failed: ${(err as Error).message}`));
      },
    );
  });
  server.on('clientError', answerClientError);
  const listening = await new Promise<boolean>((resolve) => {
    server.once('error', (err) => {
      logger.error({ err: err.message, host, port }, 'the metrics endpoint cannot listen; metrics are not served');
      resolve(false);
    });
    server.listen(port, host, () => resolve(true));
  });
  if (!listening) return { port: undefined, close: async () => undefined };
  const bound = (server.address() as AddressInfo).port;
  logger.info({ metrics: `http://${host.includes(':') ? `[${host}]` : host}:${bound}/metrics` }, 'metrics endpoint listening');
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
