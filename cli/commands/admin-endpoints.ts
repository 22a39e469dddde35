// `strata admin-endpoints list|get|create|update|delete` (GET|POST /adminEndpoints,
// GET|PUT|DELETE /adminEndpoints/{port}; docs/admin-endpoints.md).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { list } from '../output.js';

interface AdminEndpoint {
  port: number;
  ips: string[];
  ETag: string;
}

const endpointColumns = [
  { header: 'PORT', value: (e: AdminEndpoint) => String(e.port) },
  { header: 'IPS', value: (e: AdminEndpoint) => list(e.ips) },
];

export function registerAdminEndpointCommands(program: Command): void {
  const endpoints = program.command('admin-endpoints').description('ports and addresses the management API may be reached on (enforced by every agent in nftables: docs/admin-endpoints.md)');
  endpoints
    .command('list')
    .description('list admin endpoints')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ adminEndpoints: AdminEndpoint[] }>('/adminEndpoints');
      print.list(answer, answer.adminEndpoints, endpointColumns, 'no admin endpoints');
    });
  endpoints
    .command('get <port>')
    .description('show one admin endpoint')
    .action(async (port: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const endpoint = await client.get<AdminEndpoint>(apiPath`/adminEndpoints/${port}`);
      print.list(endpoint, [endpoint], endpointColumns, '');
    });
  endpoints
    .command('create <port>')
    .description('add an admin endpoint: a port and the IP addresses it is reachable on')
    .requiredOption('--ip <address...>', 'IPv4 or IPv6 addresses (no CIDR ranges)')
    .action(async (port: string, options: { ip: string[] }, command: Command) => {
      const body = { port: portOf(port), ips: ipsOf(options.ip) };
      const { client, print } = contextOf(command);
      // POST is sent once (docs/cli.md, "Retries"): a lost answer is checked with `get`.
      const created = await client.post<AdminEndpoint>('/adminEndpoints', body);
      print.list(created, [created], endpointColumns, '');
    });
  endpoints
    .command('update <port>')
    .description('replace the IP addresses of an admin endpoint')
    .requiredOption('--ip <address...>', 'the new IPv4 or IPv6 addresses (replace the old ones)')
    .action(async (port: string, options: { ip: string[] }, command: Command) => {
      const body = { ips: ipsOf(options.ip) };
      const { client, print } = contextOf(command);
      const current = await client.get<AdminEndpoint>(apiPath`/adminEndpoints/${portOf(port)}`);
      const updated = await client.put<AdminEndpoint>(apiPath`/adminEndpoints/${current.port}`, body, current.ETag);
      print.list(updated, [updated], endpointColumns, '');
    });
  endpoints
    .command('delete <port>')
    .description('remove an admin endpoint')
    .action(async (port: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/adminEndpoints/${portOf(port)}`);
      print.done(answer, `deleted admin endpoint ${port}`);
    });
}

function portOf(text: string): number {
  const port = Number(text);
  if (!/^\d{1,5}$/.test(text.trim()) || port < 1 || port > 65535) throw new UsageError(`invalid port "${text}": a whole number from 1 to 65535`);
  return port;
}

function ipsOf(values: readonly string[]): string[] {
  const cidr = values.find((v) => v.includes('/'));
  if (cidr !== undefined) throw new UsageError(`invalid --ip "${cidr}": the API takes single IP addresses, not CIDR ranges`);
  return values.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v !== '');
}
