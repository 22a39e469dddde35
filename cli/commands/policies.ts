// `strata policies list|get|create|update|delete|enforcement` (GET|POST /policies, GET|PUT|DELETE
// /policies/{UUID}, GET /policies/{UUID}/enforcement; docs/policies.md "Enforcement": a policy is
// Active only while every volume it is in effect for reports it enforced).
import { Command, Option } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { list } from '../output.js';

interface Policy {
  UUID: string;
  name: string;
  description: string;
  state: string;
  ETag: string;
  QoSRateLimitPolicy: { policyVisibility: string; projectsNamesScope: string[] } & Record<string, unknown>;
}

/** The API's three limit kinds: option stem → [limit object, write field, read field]. */
const LIMITS = {
  iops: ['limitIOPS', 'writeIOPSLimit', 'readIOPSLimit'],
  bw: ['limitBw', 'writeBWLimit', 'readBWLimit'],
  'iops-per-gb': ['limitIOPSPerGB', 'writeIOPSPerGBLimit', 'readIOPSPerGBLimit'],
} as const;
type LimitStem = keyof typeof LIMITS;

interface QosOptions {
  description?: string;
  scope?: string[];
  visibility?: string;
  [option: string]: unknown;
}

const policyColumns = [
  { header: 'UUID', value: (p: Policy) => p.UUID },
  { header: 'NAME', value: (p: Policy) => p.name },
  { header: 'STATE', value: (p: Policy) => p.state },
  { header: 'VISIBILITY', value: (p: Policy) => p.QoSRateLimitPolicy.policyVisibility },
  { header: 'SCOPE', value: (p: Policy) => list(p.QoSRateLimitPolicy.projectsNamesScope) },
  { header: 'LIMIT', value: (p: Policy) => limitOf(p.QoSRateLimitPolicy) },
];

export function registerPolicyCommands(program: Command): void {
  const policies = program.command('policies').description('QoS policies (state Active only where every volume reports them enforced: docs/policies.md)');
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
  withQosOptions(
    policies
      .command('create')
      .description('create a QoS policy with one limit (a limit left out of a pair is 0: unlimited)')
      .requiredOption('--name <name>', 'policy name (a-z A-Z 0-9 - _ .)'),
  ).action(async (options: QosOptions & { name: string }, command: Command) => {
    const qos = qosOf(options);
    if (!('limitIOPS' in qos || 'limitBw' in qos || 'limitIOPSPerGB' in qos)) {
      throw new UsageError('give one limit: --write-iops/--read-iops, --write-bw/--read-bw or --write-iops-per-gb/--read-iops-per-gb');
    }
    const { client, print } = contextOf(command);
    const created = await client.post<Policy>('/policies', { name: options.name, description: options.description, qoSRateLimitPolicy: qos });
    print.list(created, [created], policyColumns, '');
  });
  withQosOptions(
    policies
      .command('update <uuid>')
      .description('change a policy\'s description, limit, scope or visibility (what is not given stays)'),
  ).action(async (uuid: string, options: QosOptions, command: Command) => {
    const qos = qosOf(options);
    const body: Record<string, unknown> = { description: options.description, ...(Object.keys(qos).length > 0 ? { qoSRateLimitPolicy: qos } : {}) };
    if (body['description'] === undefined && body['qoSRateLimitPolicy'] === undefined) throw new UsageError('nothing to change: give --description, a limit, --scope or --visibility');
    const { client, print } = contextOf(command);
    const current = await client.get<Policy>(apiPath`/policies/${uuid}`);
    // If-Match: a change made meanwhile by someone else answers 412 instead of being overwritten.
    await client.put<unknown>(apiPath`/policies/${current.UUID}`, body, current.ETag || undefined);
    const updated = await client.get<Policy>(apiPath`/policies/${current.UUID}`);
    print.list(updated, [updated], policyColumns, '');
  });
  policies
    .command('delete <uuid>')
    .description('delete a policy (refused while a project or volume uses it)')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/policies/${uuid}`);
      print.done(answer, `deleted policy ${uuid}`);
    });
  policies
    .command('enforcement <uuid>')
    .description('whether each volume the policy is in effect for enforces it (its primary\'s report)')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ volumes: VolumeEnforcement[] }>(apiPath`/policies/${uuid}/enforcement`);
      print.list(answer, answer.volumes, enforcementColumns, 'no volume uses this policy');
    });
}

interface VolumeEnforcement {
  UUID: string;
  name: string;
  projectName: string;
  nodeUUID: string;
  state: string;
  reason: string;
  limits: { readIops: number; writeIops: number; readBytesPerSecond: number; writeBytesPerSecond: number };
}

const enforcementColumns = [
  { header: 'VOLUME', value: (v: VolumeEnforcement) => `${v.projectName}/${v.name}` },
  { header: 'UUID', value: (v: VolumeEnforcement) => v.UUID },
  { header: 'PRIMARY', value: (v: VolumeEnforcement) => v.nodeUUID || '-' },
  { header: 'STATE', value: (v: VolumeEnforcement) => v.state },
  {
    header: 'LIMITS',
    value: ({ limits: l }: VolumeEnforcement) => `riops=${l.readIops} wiops=${l.writeIops} rbps=${l.readBytesPerSecond} wbps=${l.writeBytesPerSecond}`,
  },
  { header: 'REASON', value: (v: VolumeEnforcement) => v.reason || '-' },
];

function withQosOptions(command: Command): Command {
  command.option('--description <text>', 'free text');
  for (const stem of Object.keys(LIMITS) as LimitStem[]) {
    const unit = stem === 'bw' ? 'MB/s' : stem === 'iops' ? 'IOPS' : 'IOPS per GB';
    command.addOption(new Option(`--write-${stem} <n>`, `write limit, ${unit} (0: unlimited)`));
    command.addOption(new Option(`--read-${stem} <n>`, `read limit, ${unit} (0: unlimited)`));
  }
  return command
    .option('--scope <project...>', 'the projects that may use it (visibility Scoped)')
    .addOption(new Option('--visibility <visibility>', 'Scoped (the --scope projects) or Global (every project)').choices(['Scoped', 'Global']));
}

/** The qoSRateLimitPolicy of a request from the options given (one limit kind at most). */
function qosOf(options: QosOptions): Record<string, unknown> {
  const qos: Record<string, unknown> = {};
  const camel = (text: string) => text.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
  const given = (Object.keys(LIMITS) as LimitStem[]).filter((stem) => options[camel(`write-${stem}`)] !== undefined || options[camel(`read-${stem}`)] !== undefined);
  if (given.length > 1) throw new UsageError(`give one kind of limit, not ${given.map((s) => `--*-${s}`).join(' and ')}`);
  for (const stem of given) {
    const [object, write, read] = LIMITS[stem];
    const limit: Record<string, number> = {};
    for (const [field, option] of [[write, `write-${stem}`], [read, `read-${stem}`]] as const) {
      const text = options[camel(option)] as string | undefined;
      if (text === undefined) continue;
      const value = Number(text);
      if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value)) throw new UsageError(`invalid --${option} "${text}": a whole number, 0 for unlimited`);
      limit[field] = value;
    }
    qos[object] = limit;
  }
  if (options.scope !== undefined) qos['projectsNamesScope'] = options.scope;
  if (options.visibility !== undefined) qos['policyVisibility'] = options.visibility;
  return qos;
}

function limitOf(qos: Record<string, unknown>): string {
  for (const key of ['limitIOPS', 'limitBw', 'limitIOPSPerGB']) {
    const limit = qos[key];
    if (limit && typeof limit === 'object') return `${key} ${Object.entries(limit).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`;
  }
  return '-';
}
