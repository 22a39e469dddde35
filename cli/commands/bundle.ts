// `strata bundle`: GET /api/v2/logs, the diagnostic bundle of one server (docs/diagnostics.md),
// written to a file as it streams, with its progress on stderr (cli/transfer-progress.ts: a bar on
// a terminal, plain lines every 5 s otherwise; bytes, time, rate). The
// result (file, bytes, seconds) goes to stdout, as JSON with --output json.
import { createWriteStream, promises as fs } from 'node:fs';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Option, type Command } from 'commander';
import { contextOf } from '../context.js';
import { OperationError, UsageError } from '../errors.js';
import { TransferProgress, transferSummary } from '../transfer-progress.js';
import { formatSize } from '../units.js';

interface BundleOptions {
  server?: string;
  days?: string;
  logs: boolean;
  servicesOnly?: boolean;
  statistics: boolean;
  cycles?: string;
  interval?: string;
  capture?: boolean;
  ionice?: boolean;
  prefix?: string;
  compression: 'gzip' | 'xz' | 'none';
  out?: string;
  progress: boolean;
}

export function registerBundleCommands(program: Command): void {
  program
    .command('bundle')
    .description('download the diagnostic bundle of one server (GET /logs): logs, state, CLI outputs, the redacted etcd dump')
    .option('--server <uuid>', 'the server to collect (default: the server the control plane answering runs on)')
    .option('--days <n>', 'days of logs to collect (NumOfDaysToCollectLogs; the API default is 2)')
    .option('--no-logs', 'do not collect /var/log (DontCollectlogs)')
    .option('--services-only', 'only service status, CLI outputs and the etcd dump (CollectServicesLbcliEtcd)')
    .option('--no-statistics', 'no statistics snapshots (SkipStatistics)')
    .option('--cycles <n>', 'statistics snapshots to take (NumOfstatisticsToCapture)')
    .option('--interval <seconds>', 'seconds between statistics snapshots (IntervalBetweenBEReadCycles)')
    .option('--capture', 'capture CPU and packets for five seconds (CaptureCpuAndTcpDump)')
    .option('--ionice', 'lowest IO and CPU priority for the server\'s commands (IoNice)')
    .option('--prefix <name>', 'file name prefix (LogFilename)')
    .addOption(new Option('--compression <kind>', 'gzip (.tgz), xz (.txz, UseHighCompression) or none (.tar, DontCompressOutput)').choices(['gzip', 'xz', 'none']).default('gzip'))
    .option('--out <file>', 'write here (- for stdout; default: the name the API gives, in the current directory)')
    .option('--no-progress', 'no progress on stderr (a bar on a terminal, a line every 5 s otherwise)')
    .action(async (options: BundleOptions, command: Command) => {
      const query = {
        serverUUID: options.server,
        NumOfDaysToCollectLogs: integerOf(options.days, '--days'),
        DontCollectlogs: options.logs ? undefined : true,
        CollectServicesLbcliEtcd: options.servicesOnly ? true : undefined,
        SkipStatistics: options.statistics ? undefined : true,
        NumOfstatisticsToCapture: integerOf(options.cycles, '--cycles'),
        IntervalBetweenBEReadCycles: integerOf(options.interval, '--interval'),
        CaptureCpuAndTcpDump: options.capture ? true : undefined,
        IoNice: options.ionice ? true : undefined,
        LogFilename: options.prefix,
        UseHighCompression: options.compression === 'xz' ? true : undefined,
        DontCompressOutput: options.compression === 'none' ? true : undefined,
      };
      const { client, print } = contextOf(command);
      const interrupted = new AbortController();
      const onSignal = () => interrupted.abort(new Error('interrupted'));
      process.once('SIGINT', onSignal);
      const started = Date.now();
      const response = await client.download('/logs', query, interrupted.signal);
      const filename = /filename="([^"/]+)"/.exec(response.headers.get('content-disposition') ?? '')?.[1] ?? 'strata-bundle';
      const target = options.out ?? filename;
      const toStdout = target === '-';
      if (toStdout && process.stdout.isTTY) throw new UsageError('refusing to write an archive to a terminal: give --out FILE');
      let bytes = 0;
      const progress = options.progress ? new TransferProgress(process.stderr, filename, { startedAt: started }).start() : undefined;
      const out = toStdout ? process.stdout : createWriteStream(target, { flags: 'wx', mode: 0o600 });
      if (!toStdout) await once(out, 'open');
      try {
        const body = Readable.fromWeb(response.body as import('node:stream/web').ReadableStream<Uint8Array>);
        body.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          progress?.received(chunk.length);
        });
        await pipeline(body, out, { end: !toStdout });
      } catch (err) {
        if (!toStdout) await fs.rm(target, { force: true });
        throw new OperationError(`the bundle was cut off after ${formatSize(BigInt(bytes))} (${(err as Error).message}); nothing was kept`);
      } finally {
        progress?.stop();
        process.removeListener('SIGINT', onSignal);
      }
      const elapsedMs = Date.now() - started;
      const rate = () => transferSummary({ bytes, elapsedMs });
      const seconds = elapsedMs / 1000;
      // With --out -, stdout is the archive: the result goes to stderr.
      if (toStdout) print.note(`strata: wrote ${filename} to stdout: ${rate()}`);
      else if (print.format === 'json') print.json({ file: target, bytes, seconds });
      else print.line(`wrote ${target}: ${rate()}`);
    });
}

function integerOf(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`${flag} must be a whole number, not "${value}"`);
  return Number(value);
}
