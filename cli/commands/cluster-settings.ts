// Cluster-wide settings and views: `strata feature-flags list|get|enable|disable`
// (GET /featureFlags[/{name}], POST …/{name}/enable|disable; docs/feature-flags.md),
// `strata admin-endpoints list|get` (GET /adminEndpoints[/{port}]; docs/admin-endpoints.md),
// `strata connected-hosts list|get` (GET /connectedHosts[/{hostNQN}]; docs/connected-hosts.md),
// `strata policies list|get|delete` (GET /policies[/{UUID}], DELETE; docs/policies.md).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { list } from '../output.js';

interface FeatureFlag {
  name: string;
  enabled: boolean;
}
interface AdminEndpoint {
  port: number;
  ips: string[];
  ETag: string;
}
interface ConnectedHost {
  hostNQN: string;
  iPAddress: string;
  hostname: string;
  volumeUUIDs: string[];
  connectedNodesUUID: string[];
  unconnectedNodesUUID: string[];
}
interface Policy {
  UUID: string;
  name: string;
  description: string;
  state: string;
  QoSRateLimitPolicy: { policyVisibility: string; projectsNamesScope: string[] } & Record<string, unknown>;
}

export function registerClusterSettingsCommands(program: Command): void {
  const flags = program.command('feature-flags').description('feature flags of the cluster');
  flags
    .command('list')
    .description('list every feature flag and whether it is enabled')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ featureFlags: Record<string, FeatureFlag> }>('/featureFlags');
      print.list(answer, Object.values(answer.featureFlags), flagColumns, 'no feature flags');
    });
  flags
    .command('get <name>')
    .description('show one feature flag')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const flag = await client.get<FeatureFlag>(apiPath`/featureFlags/${name}`);
      print.list(flag, [flag], flagColumns, '');
    });
  for (const action of ['enable', 'disable'] as const) {
    flags
      .command(`${action} <name>`)
      .description(`${action} a feature flag`)
      .action(async (name: string, _options: object, command: Command) => {
        const { client, print } = contextOf(command);
        await client.post(apiPath`/featureFlags/${name}/${action}`, {});
        const flag = await client.get<FeatureFlag>(apiPath`/featureFlags/${name}`);
        print.list(flag, [flag], flagColumns, '');
      });
  }

  const endpoints = program.command('admin-endpoints').description('ports and addresses the management API may be reached on');
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

  const hosts = program.command('connected-hosts').description('hosts connected to the cluster\'s volumes');
  hosts
    .command('list')
    .description('list connected hosts')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ connectedHosts: ConnectedHost[] }>('/connectedHosts');
      print.list(answer, answer.connectedHosts, hostColumns, 'no connected hosts');
    });
  hosts
    .command('get <hostNQN>')
    .description('show one connected host')
    .action(async (hostNQN: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const host = await client.get<ConnectedHost>(apiPath`/connectedHosts/${hostNQN}`);
      print.list(host, [host], hostColumns, '');
    });

  const policies = program.command('policies').description('QoS policies (stored and assigned; not enforced yet: docs/policies.md)');
  policies
    .command('list')
    .description('list policies')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ policies: Policy[] }>('/policies');
      print.list(answer, answer.policies, policyColumns, 'no policies');
    });
  policies
    .command('get <uuid>')
    .description('show one policy')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const policy = await client.get<Policy>(apiPath`/policies/${uuid}`);
      print.list(policy, [policy], policyColumns, '');
    });
  policies
    .command('delete <uuid>')
    .description('delete a policy (refused while a project or volume uses it)')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/policies/${uuid}`);
      if (print.format === 'json') print.json(answer);
      else print.line(`deleted policy ${uuid}`);
    });
}

const flagColumns = [
  { header: 'NAME', value: (f: FeatureFlag) => f.name },
  { header: 'ENABLED', value: (f: FeatureFlag) => String(f.enabled) },
];
const endpointColumns = [
  { header: 'PORT', value: (e: AdminEndpoint) => String(e.port) },
  { header: 'IPS', value: (e: AdminEndpoint) => list(e.ips) },
];
const hostColumns = [
  { header: 'HOST NQN', value: (h: ConnectedHost) => h.hostNQN },
  { header: 'ADDRESS', value: (h: ConnectedHost) => h.iPAddress },
  { header: 'VOLUMES', value: (h: ConnectedHost) => String(h.volumeUUIDs.length) },
  { header: 'CONNECTED NODES', value: (h: ConnectedHost) => list(h.connectedNodesUUID) },
  { header: 'UNCONNECTED NODES', value: (h: ConnectedHost) => list(h.unconnectedNodesUUID) },
];
const policyColumns = [
  { header: 'UUID', value: (p: Policy) => p.UUID },
  { header: 'NAME', value: (p: Policy) => p.name },
  { header: 'STATE', value: (p: Policy) => p.state },
  { header: 'VISIBILITY', value: (p: Policy) => p.QoSRateLimitPolicy.policyVisibility },
  { header: 'SCOPE', value: (p: Policy) => list(p.QoSRateLimitPolicy.projectsNamesScope) },
  { header: 'LIMIT', value: (p: Policy) => limitOf(p.QoSRateLimitPolicy) },
];

function limitOf(qos: Record<string, unknown>): string {
  for (const key of ['limitIOPS', 'limitBw', 'limitIOPSPerGB']) {
    const limit = qos[key];
    if (limit && typeof limit === 'object') return `${key} ${Object.entries(limit).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`;
  }
  return '-';
}
