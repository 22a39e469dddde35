// The etcd3 client with the settings both daemons use.
import { readFileSync } from 'node:fs';
import { ConsecutiveBreaker, circuitBreaker, handleWhen, retry } from 'cockatiel';
import { Etcd3, isRecoverableError } from 'etcd3';
import { z } from 'zod';
import { StrataError } from '../errors.js';
import { etcdRequestDuration } from '../metrics.js';

/** etcd client TLS, the same settings in both daemons (docs/install.md "etcd with TLS"). */
export const etcdTlsSettings = {
  etcdCaFile: { description: 'PEM CA certificate that verifies etcd\'s server certificate: connect to etcd over TLS (https://)', schema: z.string().optional(), default: undefined },
  etcdCertFile: { description: 'PEM client certificate presented to etcd (with --client-cert-auth); set with etcdKeyFile and etcdCaFile', schema: z.string().optional(), default: undefined },
  etcdKeyFile: { description: 'PEM private key of etcdCertFile', schema: z.string().optional(), default: undefined },
} as const;

export interface EtcdTlsFiles {
  readonly etcdCaFile?: string | undefined;
  readonly etcdCertFile?: string | undefined;
  readonly etcdKeyFile?: string | undefined;
}

export interface EtcdTls {
  readonly rootCertificate: Buffer;
  readonly privateKey?: Buffer;
  readonly certChain?: Buffer;
}

/** The etcd client TLS of a daemon's settings; undefined: plain-text etcd. Files are read now (a bad path stops the daemon). */
export function etcdTlsOf(config: EtcdTlsFiles): EtcdTls | undefined {
  const { etcdCaFile, etcdCertFile, etcdKeyFile } = config;
  if (Boolean(etcdCertFile) !== Boolean(etcdKeyFile)) throw new StrataError('CONFIG_INVALID', 'etcdCertFile and etcdKeyFile must be given together');
  if (!etcdCaFile) {
    if (etcdCertFile) throw new StrataError('CONFIG_INVALID', 'etcdCertFile needs etcdCaFile (the CA that verifies etcd)');
    return undefined;
  }
  const read = (setting: string, path: string) => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new StrataError('CONFIG_INVALID', `${setting}: cannot read ${path}: ${(err as Error).message}`);
    }
  };
  return {
    rootCertificate: read('etcdCaFile', etcdCaFile),
    ...(etcdCertFile && etcdKeyFile ? { certChain: read('etcdCertFile', etcdCertFile), privateKey: read('etcdKeyFile', etcdKeyFile) } : {}),
  };
}

/** How long an etcd host that failed 3 calls in a row is skipped before it is tried again. */
const HOST_RETRY_AFTER_MS = 1000;

export function createEtcdClient(endpoints: readonly string[], dialTimeoutMs = 3000, tls?: EtcdTls): Etcd3 {
  // etcd3's own default global policy (three attempts on recoverable errors), made explicit so
  // every unary request's latency is measured (strata_etcd_request_duration_seconds).
  const global = retry(handleWhen(isRecoverableError), { maxAttempts: 3 });
  global.onSuccess(({ duration }) => etcdRequestDuration.labels('ok').observe(duration / 1000));
  global.onFailure(({ duration }) => etcdRequestDuration.labels('error').observe(duration / 1000));
  return new Etcd3({
    hosts: endpoints.map((e) => (e.includes('://') ? e : `${tls ? 'https' : 'http'}://${e}`)),
    ...(tls ? { credentials: tls } : {}),
    dialTimeout: dialTimeoutMs,
    // gRPC's default 4 MiB receive limit is less than one range over 10,000 volume records.
    grpcOptions: { 'grpc.max_receive_message_length': 512 * 1024 * 1024 },
    // Fail fast and let callers map unavailability to 503; the faults policy retries nothing
    // that is not idempotent.
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + 5000 }),
    // etcd3's default breaker skips a failed host for 5 s: after a network cut that delays
    // re-registration (a node staying Inactive) by up to 5 s more than the cut itself.
    faultHandling: {
      global,
      host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: HOST_RETRY_AFTER_MS, breaker: new ConsecutiveBreaker(3) }),
    },
  });
}

/** Parses a stored JSON record; etcd values are always ours, so a parse failure is corruption. */
export function parseRecord<T>(key: string, value: string | Buffer | null): T | null {
  if (value === null) return null;
  try {
    return JSON.parse(typeof value === 'string' ? value : value.toString('utf8')) as T;
  } catch (err) {
    throw new Error(`corrupt record at ${key}: ${(err as Error).message}`);
  }
}

/**
 * A transaction that always commits (etcd3 builds multi-op transactions from a compare): use it
 * to apply several operations atomically, or to read several ranges at one revision.
 */
export function unconditionalTxn(etcd: Etcd3) {
  // Any key's mod_revision is >= 0 (0 when absent), so this compare always holds.
  return etcd.if('/strata/', 'Mod', '>', -1);
}
