// The diagnostic bundle (GET /api/v2/logs, docs/diagnostics.md): one server's tar, compressed
// as asked, streamed as it is made. The control plane writes the cluster's part (CLI outputs of
// the main resources, the redacted etcd dump) and the server's agent collects the rest over its
// gRPC session (CollectBundle → BundleChunk), paced by credits: a piece is asked of the agent
// only when the client has taken the bytes before it, so neither process holds the bundle in
// memory, and a client that goes away cancels the agent's collection at once.
import { execFile, spawn } from 'node:child_process';
import { createReadStream, promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duplex, PassThrough, Readable, pipeline } from 'node:stream';
import { createGzip } from 'node:zlib';
import { errors } from '../../lib/errors.js';
import { which } from '../../lib/executables.js';
import type { Logger } from '../../lib/logger.js';
import { packageRoot } from '../../lib/paths.js';
import type { BundleChunk__Output } from '../../proto/gen/strata/v1/BundleChunk.js';
import type { CollectBundle } from '../../proto/gen/strata/v1/CollectBundle.js';
import type { AgentSessions, BundleListener, BundleTransfer } from '../agents/agent-sessions.js';
import { withQueryParam, type CallerRequest, type ForwardedAnswer, type SessionRouting } from '../agents/session-routing.js';
import type { InventorySource } from '../inventory/inventory-reader.js';
import type { BundleCompression, BundleRequest } from './logs-schema.js';
import { TAR_END, tarHeader, tarPadding } from './tar.js';

/** Data pieces the agent may have in flight (64 KiB each: at most 1 MiB between client and agent). */
export const BUNDLE_CREDIT_WINDOW = 16;
const CLI_TIMEOUT_MS = 60_000;

/** The CLI commands whose outputs the bundle holds (their table output, as an operator sees it). */
export const BUNDLE_CLI_COMMANDS: readonly (readonly [file: string, args: readonly string[]])[] = [
  ['cluster-info.txt', ['cluster', 'info']],
  ['nodes.txt', ['nodes', 'list']],
  ['servers.txt', ['servers', 'list']],
  ['devices.txt', ['devices', 'list']],
  ['volumes.txt', ['volumes', 'list', '--all-pages']],
  ['projects.txt', ['projects', 'list']],
  ['events.txt', ['events', 'list', '--limit', '500']],
];

const FORMATS: Record<BundleCompression, { extension: string; contentType: string }> = {
  gzip: { extension: 'tgz', contentType: 'application/gzip' },
  xz: { extension: 'txz', contentType: 'application/x-xz' },
  none: { extension: 'tar', contentType: 'application/x-tar' },
};

export interface LogsServiceDeps {
  readonly inventory: InventorySource;
  readonly sessions: AgentSessions;
  /** Where a server's agent session is: a bundle of another control plane's agent is made there. */
  readonly routing: Pick<SessionRouting, 'elsewhere'>;
  /** Writes the redacted etcd dump to a file (etcd-dump.ts). */
  readonly dumpEtcd: (file: string) => Promise<unknown>;
  /** This control plane's own API, for the CLI outputs (NODE_EXTRA_CA_CERTS when it serves HTTPS). */
  readonly api: { readonly endpoint: string; readonly caFile?: string | undefined };
  /** The host this control plane runs on: its server is the default one. */
  readonly hostname: string;
  readonly logger: Logger;
}

export interface Bundle {
  readonly filename: string;
  readonly contentType: string;
  readonly stream: Readable;
}

export class LogsService {
  constructor(private readonly deps: LogsServiceDeps) {}

  /**
   * Starts a bundle of the chosen server: 404 for an unknown server, 400 when none is named and
   * this host is no server of the cluster, 503 when no control plane holds its agent's session (or
   * xz is missing for UseHighCompression). `token` runs the CLI as the caller. When another control
   * plane holds the session, `caller`'s request goes there, naming the chosen server, and its
   * answer is returned as it came (session-routing.ts): that control plane makes the bundle.
   */
  async open(request: BundleRequest, token: string, caller: CallerRequest): Promise<Bundle | ForwardedAnswer> {
    const server = await this.chooseServer(request.serverUUID);
    const forwarded = await this.deps.routing.elsewhere(server.UUID, { ...caller, url: withQueryParam(caller.url, 'serverUUID', server.UUID) });
    if (forwarded) return forwarded;
    if (request.compression === 'xz' && !(await which('xz'))) {
      throw errors.unavailable('UseHighCompression needs xz on the control plane’s server, and it is not installed');
    }
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
    const top = `${request.filenamePrefix}-${server.hostname}-${stamp}`;
    const format = FORMATS[request.compression];
    const log = this.deps.logger.child({ bundle: top, serverUUID: server.UUID });
    log.info({ request: { ...request } }, 'diagnostic bundle: started');
    const started = Date.now();

    let transfer: BundleTransfer | undefined;
    const queue = new ChunkQueue();
    const tar = Readable.from(this.archive(top, server.UUID, request, token, queue, (t) => (transfer = t)), { objectMode: false, highWaterMark: 64 * 1024 });
    // A client that goes away (or any failure) ends the agent's collection at once, even while
    // the archive waits for the agent's next piece.
    tar.once('close', () => {
      transfer?.cancel('the client of the bundle went away');
      queue.fail(new Error('the bundle was closed'));
    });
    const out = new PassThrough();
    const done = (err: Error | null | undefined) => {
      if (err) {
        log.warn({ err: err.message, ms: Date.now() - started }, 'diagnostic bundle: ended early');
        out.destroy(err);
      } else {
        log.info({ ms: Date.now() - started }, 'diagnostic bundle: sent');
      }
    };
    if (request.compression === 'gzip') pipeline(tar, createGzip(), out, done);
    else if (request.compression === 'xz') pipeline(tar, xzCompressor(), out, done);
    else pipeline(tar, out, done);
    return { filename: `${top}.${format.extension}`, contentType: format.contentType, stream: out };
  }

  private async chooseServer(serverUUID: string | undefined): Promise<{ UUID: string; hostname: string }> {
    const { servers } = await this.deps.inventory.read();
    if (serverUUID !== undefined) {
      const server = servers.get(serverUUID);
      if (!server) throw errors.notFound('server', serverUUID);
      return { UUID: serverUUID, hostname: server.record.hostname };
    }
    const own = [...servers.values()].find((s) => s.record.hostname === this.deps.hostname);
    if (!own) {
      throw errors.invalid(`invalid request: this control plane runs on ${this.deps.hostname}, which is no server of the cluster; name one with serverUUID`);
    }
    return { UUID: own.record.UUID, hostname: own.record.hostname };
  }

  private async *archive(
    top: string,
    serverUUID: string,
    request: BundleRequest,
    token: string,
    queue: ChunkQueue,
    opened: (transfer: BundleTransfer) => void,
  ): AsyncGenerator<Buffer> {
    const dir = await fs.mkdtemp(join(tmpdir(), 'strata-bundle-cp-'));
    let transfer: BundleTransfer | undefined;
    let ended = false;
    try {
      // The agent starts at once (it prepares its first entry while the cluster part is written).
      transfer = this.deps.sessions.openBundle(serverUUID, collectOptions(request), queue);
      opened(transfer);
      yield* this.clusterPart(dir, top, token);
      let granted = 0;
      let received = 0;
      let remaining = 0;
      let entrySize = 0;
      for (;;) {
        if (granted - received <= BUNDLE_CREDIT_WINDOW / 2) {
          transfer.grant(BUNDLE_CREDIT_WINDOW - (granted - received));
          granted = received + BUNDLE_CREDIT_WINDOW;
        }
        const chunk = await queue.next();
        if (chunk.part === 'entry' && chunk.entry) {
          if (remaining > 0) throw new Error('the agent started an entry before the previous one was complete');
          const size = Number(chunk.entry.size);
          yield tarHeader({ path: `${top}/server/${safePath(chunk.entry.path)}`, size, mode: chunk.entry.mode, mtimeSeconds: Number(chunk.entry.mtime_seconds) });
          remaining = size;
          entrySize = size;
        } else if (chunk.part === 'data' && chunk.data) {
          received += 1;
          if (chunk.data.length > remaining) throw new Error('the agent sent more data than its entry declared');
          remaining -= chunk.data.length;
          yield chunk.data;
          if (remaining === 0) yield tarPadding(entrySize);
        } else if (chunk.part === 'end') {
          ended = true;
          transfer.finished();
          if (chunk.end?.error) throw new Error(`the agent could not collect the bundle: ${chunk.end.error}`);
          if (remaining > 0) throw new Error('the agent ended the bundle inside an entry');
          break;
        }
      }
      yield TAR_END;
    } finally {
      if (!ended) transfer?.cancel('the bundle ended early');
      await fs.rm(dir, { recursive: true, force: true });
    }
  }

  /** The cluster's part: the CLI outputs and the etcd dump, each a file in `dir` first. */
  private async *clusterPart(dir: string, top: string, token: string): AsyncGenerator<Buffer> {
    const files: [string, string][] = [];
    await Promise.all([
      ...BUNDLE_CLI_COMMANDS.map(async ([name, args]) => {
        const file = join(dir, name);
        await fs.writeFile(file, await this.cliOutput(args, token));
        files.push([`cli/${name}`, file]);
      }),
      (async () => {
        const file = join(dir, 'etcd-dump.jsonl');
        try {
          await this.deps.dumpEtcd(file);
        } catch (err) {
          await fs.writeFile(file, `the etcd dump failed: ${(err as Error).message}\n`);
        }
        files.push(['etcd-dump.jsonl', file]);
      })(),
    ]);
    for (const [path, file] of files.sort((a, b) => a[0].localeCompare(b[0]))) yield* fileEntry(`${top}/cluster/${path}`, file);
  }

  /** One CLI command's output as the caller would see it (its stderr and status too). */
  private cliOutput(args: readonly string[], token: string): Promise<string> {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      STRATA_ENDPOINT: this.deps.api.endpoint,
      STRATA_TOKEN: token,
      ...(this.deps.api.caFile ? { STRATA_CA_FILE: this.deps.api.caFile } : {}),
    };
    return new Promise((resolve) => {
      execFile(process.execPath, [join(packageRoot, 'dist/cli/main.js'), ...args], { env, timeout: CLI_TIMEOUT_MS, maxBuffer: 32 * 1024 * 1024 }, (err, stdout, stderr) => {
        const status = err ? `exit status ${(err as { code?: unknown }).code ?? err.message}` : 'exit status 0';
        resolve(`$ strata ${args.join(' ')}\n${stdout}${stderr ? `\n${stderr}` : ''}\n# ${status}\n`);
      });
    });
  }
}

/** The agent's chunks, waited for one at a time. */
class ChunkQueue implements BundleListener {
  private readonly items: BundleChunk__Output[] = [];
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  chunk(chunk: BundleChunk__Output): void {
    this.items.push(chunk);
    this.wake?.();
  }

  lost(reason: string): void {
    this.fail(new Error(reason));
  }

  fail(err: Error): void {
    this.failure ??= err;
    this.wake?.();
  }

  async next(): Promise<BundleChunk__Output> {
    for (;;) {
      const item = this.items.shift();
      if (item) return item;
      if (this.failure) throw this.failure;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

async function* fileEntry(path: string, file: string): AsyncGenerator<Buffer> {
  const stat = await fs.stat(file);
  yield tarHeader({ path, size: stat.size, mtimeSeconds: Math.floor(stat.mtimeMs / 1000) });
  let sent = 0;
  for await (const piece of createReadStream(file, { end: Math.max(0, stat.size - 1), highWaterMark: 64 * 1024 })) {
    const bytes = (piece as Buffer).subarray(0, stat.size - sent);
    sent += bytes.length;
    yield bytes;
  }
  yield tarPadding(stat.size);
}

/** An agent's entry path inside the server's directory: relative, no `..`. */
function safePath(path: string): string {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.length === 0 || parts.some((p) => p === '..')) throw new Error(`the agent sent an entry path outside its directory: ${JSON.stringify(path)}`);
  return parts.join('/');
}

function collectOptions(request: BundleRequest): CollectBundle {
  return {
    days_of_logs: request.daysOfLogs,
    skip_statistics: request.skipStatistics,
    statistics_cycles: request.statisticsCycles,
    statistics_interval_seconds: request.statisticsIntervalSeconds,
    capture_cpu_and_tcpdump: request.captureCpuAndTcpDump,
    services_only: request.servicesOnly,
    skip_var_log: request.skipVarLog,
    io_nice: request.ioNice,
  };
}

/** xz as a stream stage (a child process); destroyed, it kills the child. */
function xzCompressor(): Duplex {
  const child = spawn('xz', ['-6', '-T1', '-c'], { stdio: ['pipe', 'pipe', 'ignore'] });
  const duplex = Duplex.from({ writable: child.stdin, readable: child.stdout });
  duplex.once('close', () => child.kill());
  return duplex;
}
