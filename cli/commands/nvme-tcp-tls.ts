// `strata tls-hosts list|get|create|delete|psk|rotate` (GET|POST /tlsHosts, GET|DELETE
// /tlsHosts/{name}, GET|PUT /tlsHostPSKs/{name}) and `strata nvme-tcp-tls status|enable|disable`
// (GET /cluster/nvmeTcpTls, POST …/enable|disable): TLS on NVMe/TCP (docs/nvme-tcp-tls.md). PSKs
// are given in files or the environment, never on the command line (visible in `ps`).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import type { TlsHostWire } from '../../control-plane/nvme-tcp-tls/nvme-tcp-tls-service.js';
import { secretFrom } from './in-band-auth.js';

const columns = [
  { header: 'NAME', value: (h: TlsHostWire) => h.name },
  { header: 'HOST NQN', value: (h: TlsHostWire) => h.hostNQN },
  { header: 'PSK UPDATED', value: (h: TlsHostWire) => h.pskUpdatedAt },
];

interface PskOptions {
  pskFile?: string;
  pskEnv?: string;
}

function requiredPsk(options: PskOptions): string {
  const psk = secretFrom(options.pskFile, options.pskEnv, '--psk-env');
  if (psk === undefined) throw new UsageError("give the host's TLS PSK with --psk-file FILE or --psk-env NAME");
  return psk;
}

export function registerNvmeTcpTlsCommands(program: Command): void {
  const hosts = program.command('tls-hosts').description('hosts that may connect over TLS, with a PSK each (docs/nvme-tcp-tls.md)');
  hosts
    .command('list')
    .description('every TLS host (no PSKs)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ tlsHosts: TlsHostWire[] }>('/tlsHosts');
      print.list(answer, answer.tlsHosts, columns, 'no TLS hosts');
    });
  hosts
    .command('get <name>')
    .description('one TLS host (no PSK)')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const host = await client.get<TlsHostWire>(apiPath`/tlsHosts/${name}`);
      print.list(host, [host], columns, '');
    });
  const withPsk = (c: Command) =>
    c.option('--psk-file <file>', "file whose first line is the host's configured PSK (NVMeTLSkey-1:..., nvme gen-tls-key)").option('--psk-env <name>', "environment variable holding the host's PSK");
  withPsk(hosts.command('create <name> <hostNQN>').description('a host that may connect over TLS: its NQN and PSK')).action(async (name: string, hostNQN: string, options: PskOptions, command: Command) => {
    const psk = requiredPsk(options);
    const { client, print } = contextOf(command);
    // POST is sent once (docs/cli.md, "Retries"): a lost answer is checked with `get`.
    const created = await client.post<TlsHostWire>('/tlsHosts', { name, hostNQN, psk });
    print.list(created, [created], columns, '');
  });
  withPsk(hosts.command('rotate <name>').description("replace a TLS host's PSK: new connections need the new one")).action(async (name: string, options: PskOptions, command: Command) => {
    const psk = requiredPsk(options);
    const { client, print } = contextOf(command);
    const current = await client.get<TlsHostWire>(apiPath`/tlsHosts/${name}`);
    const answer = await client.put<unknown>(apiPath`/tlsHostPSKs/${name}`, { psk }, current.ETag);
    print.done(answer, `rotated the PSK of TLS host ${name}`);
  });
  hosts
    .command('psk <name>')
    .description("print a TLS host's PSK (one host at a time)")
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ psk: string }>(apiPath`/tlsHostPSKs/${name}`);
      print.done(answer, answer.psk);
    });
  hosts
    .command('delete <name>')
    .description('remove a TLS host')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/tlsHosts/${name}`);
      print.done(answer, `deleted TLS host ${name}`);
    });

  const tls = program.command('nvme-tcp-tls').description('require TLS (a PSK per host) on every volume port, or stop requiring it');
  tls
    .command('status')
    .description('Required or Disabled')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ mode: string }>('/cluster/nvmeTcpTls');
      print.done(answer, answer.mode);
    });
  for (const action of ['enable', 'disable'] as const) {
    tls
      .command(action)
      .description(action === 'enable' ? 'volume ports admit TLS 1.3 with a TLS host\'s PSK only (needs NVMe/TCP TLS and tlshd on every node)' : 'volume ports admit hosts without TLS again')
      .action(async (_options: object, command: Command) => {
        const { client, print } = contextOf(command);
        const answer = await client.post<unknown>(`/cluster/nvmeTcpTls/${action}`, {});
        print.done(answer, `TLS on NVMe/TCP ${action}d`);
      });
  }
}
