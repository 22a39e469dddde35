// The discovery controller's TCP listener: accepts up to maxConnections hosts, gives each a
// DiscoveryConnection, hands out controller IDs, and closes every connection on stop.
import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from '../../lib/logger.js';
import { DEFAULT_LIMITS, DiscoveryConnection, type ControllerContext, type ControllerLimits } from './controller.js';
import type { HostLogs } from './host-logs.js';
import type { PresentedHosts } from './presented-hosts.js';
import { discoveryConnectionsAccepted } from '../metrics/agent-metrics.js';

export interface DiscoveryServerOptions {
  readonly listenAddress: string;
  /** 0: any free port (tests); `port` tells which. */
  readonly port: number;
  readonly maxConnections: number;
  readonly logs: HostLogs;
  readonly identity: ControllerContext['identity'];
  readonly limits?: Partial<ControllerLimits>;
  readonly presented?: PresentedHosts;
  readonly logger: Logger;
}

/** Controller IDs 1..0xFFEF (0xFFF0 and up are reserved). */
const MAX_CNTLID = 0xffef;

export class DiscoveryServer {
  private readonly connections = new Set<DiscoveryConnection>();
  private readonly cntlids = new Set<number>();
  private readonly context: ControllerContext;

  private constructor(
    private readonly server: Server,
    readonly port: number,
    options: DiscoveryServerOptions,
  ) {
    this.context = {
      logs: options.logs,
      limits: { ...DEFAULT_LIMITS, ...options.limits },
      identity: options.identity,
      ...(options.presented ? { presented: options.presented } : {}),
      logger: options.logger,
      // Random, so that two nodes rarely give one host the same ID for the cluster's unique
      // discovery NQN (Linux refuses a second controller with a duplicate ID in one subsystem).
      allocateCntlid: () => {
        if (this.cntlids.size >= MAX_CNTLID) return undefined;
        for (;;) {
          const id = 1 + Math.floor(Math.random() * MAX_CNTLID);
          if (!this.cntlids.has(id)) {
            this.cntlids.add(id);
            return id;
          }
        }
      },
      releaseCntlid: (id) => this.cntlids.delete(id),
    };
  }

  /** Listens; rejects when the address cannot be bound (in use, not local). */
  static async listen(options: DiscoveryServerOptions): Promise<DiscoveryServer> {
    const server = createServer({ noDelay: true });
    server.maxConnections = options.maxConnections;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: options.listenAddress, port: options.port, exclusive: true }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : options.port;
    const discovery = new DiscoveryServer(server, port, options);
    server.on('connection', (socket) => discovery.accept(socket));
    server.on('drop', (info) => options.logger.warn({ peer: `${info?.remoteAddress}:${info?.remotePort}`, maxConnections: options.maxConnections }, 'discovery connection refused: too many connections'));
    server.on('error', (err) => options.logger.error({ err }, 'discovery listener error'));
    options.logger.info({ address: options.listenAddress, port }, 'NVMe/TCP discovery controller listening');
    return discovery;
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Stops listening and closes every connection. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const connection of [...this.connections]) connection.close('the discovery controller stops');
    await closed;
  }

  private accept(socket: Socket): void {
    const connection = new DiscoveryConnection(socket, this.context);
    discoveryConnectionsAccepted.inc();
    this.connections.add(connection);
    connection.onClose(() => this.connections.delete(connection));
  }
}
