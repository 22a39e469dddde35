// `strata volumes …`: list, get, create, clone, resize, rollback, wait, delete, connect-info,
// acl add|remove.
// Routes and fields: spec 2.15 / 4.11, docs/volumes.md. Once a volume is found, every call uses
// its project-scoped path (/projects/{p}/volumes/{UUID}), which checks the caller against that
// project before anything else.
import { Command, Option } from 'commander';
import { apiPath, type ApiClient } from '../api-client.js';
import { contextOf, type CommandContext } from '../context.js';
import { ApiError, OperationError, UsageError } from '../errors.js';
import { formatTime, list, type Printer } from '../output.js';
import { listPages, parsePageLimit } from '../paging.js';
import { aclAdmits, ALLOW_ANY, ALLOW_NONE, isAclPseudoValue } from '../../lib/contract/acl.js';
import { isUuid } from '../../lib/contract/uuid.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import { DEFAULT_PROJECT, parseResourceRef, type ResourceRef } from '../resource-ref.js';
import { parseDurationMs, parseSize } from '../units.js';
import { waitFor } from '../wait.js';

/** The volume fields the CLI reads (the API sends more; --output json shows them all). */
export interface Volume {
  UUID: string;
  name: string;
  projectName: string;
  size: string;
  state: string;
  protectionState: string;
  replicaCount: number;
  nodeList: string[];
  primaryNodeUUID: string;
  acl: { values: string[] };
  IPAcl: { values: string[] };
  compression: string;
  sectorSize: number;
  qosPolicyName: string;
  qosPolicyUUID: string;
  labels: { key: string; value: string }[];
  creationTime: string;
  connectedHosts: string[];
  rebuildProgress: string;
  sourceSnapshotName: string;
  nsid: number;
  ETag: string;
}

interface VolumeConnection {
  UUID: string;
  name: string;
  projectName: string;
  state: string;
  subsystemNQN: string;
  paths: { nodeUUID: string; address: string; port: number; primary: boolean; served: boolean }[];
  devicePath: string;
  acl: string[];
  commands: { connect: string[]; discover: string[]; connectAll: string[] };
  clusterSubsystem: { subsystemNQN: string; directConnect: string; reason: string; instead: string[] };
}

/** Longer than the control plane's creating timeout (120 s), so its verdict normally comes first. */
const DEFAULT_WAIT_TIMEOUT = '5m';
/** What the connection answer puts where the host's NQN goes. */
const HOST_NQN_PLACEHOLDER = /<host NQN[^>]*>/g;

export function registerVolumeCommands(program: Command): void {
  const volumes = program.command('volumes').description('block volumes: list, create, resize, delete, ACLs, how hosts connect');
  const waitTimeoutOption = () =>
    new Option('--wait-timeout <duration>', 'give up waiting after this long (e.g. 90s, 5m)').default(DEFAULT_WAIT_TIMEOUT);

  volumes
    .command('list')
    .description('list volumes (every project with a cluster-role token, else give --project)')
    .option('--project <name>', 'only this project')
    .option('--all-pages', 'follow pages until every volume is listed (the API answers at most 1000 per page)')
    .option('--limit <n>', 'page size (1-1000; the API default is 1000)')
    .option('--show-all', 'include volumes being deleted (state Deleting)')
    .action(async (options: { project?: string; allPages?: boolean; limit?: string; showAll?: boolean }, command: Command) => {
      const limit = parsePageLimit(options.limit);
      const { client, print } = contextOf(command);
      const path = options.project === undefined ? '/volumes' : apiPath`/projects/${options.project}/volumes`;
      const listed = await listPages<Volume>(client, path, 'volumes', { showAll: options.showAll ? 'true' : undefined }, { allPages: options.allPages === true, limit });
      if (print.format === 'json') print.json(listed.answer);
      else {
        print.table(listed.items, [
          { header: 'UUID', value: (v) => v.UUID },
          { header: 'PROJECT', value: (v) => v.projectName },
          { header: 'NAME', value: (v) => v.name },
          { header: 'SIZE', value: (v) => print.size(v.size) },
          { header: 'STATE', value: (v) => v.state },
          { header: 'PROTECTION', value: (v) => v.protectionState },
          { header: 'REPLICAS', value: (v) => String(v.replicaCount) },
          { header: 'ACL', value: (v) => aclSummary(v.acl.values) },
        ], 'no volumes');
      }
      if (listed.mayHaveMore) print.note(`strata: the page is full; more volumes may follow: add --all-pages`);
    });

  volumes
    .command('get')
    .description('show one volume')
    .argument('<volume>', 'UUID or project/name')
    .action(async (volumeArg: string, _options: object, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      if (print.format === 'json') print.json(volume);
      else printVolume(print, volume);
    });

  const creation = (command: Command) =>
    command
      .option('--replicas <n>', 'replica count, 1-3 (API default 1)')
      .option('--acl <hostNQN...>', 'host NQNs that may connect (API default ALLOW_NONE: no host)')
      .option('--ip-acl <address...>', 'IP addresses that may connect (API default ALLOW_ANY; no CIDR ranges)')
      .option('--policy <name|UUID>', 'QoS policy (default: the project\'s)')
      .option('--wait', 'wait until the volume is Available (or Failed), with progress on stderr')
      .addOption(waitTimeoutOption());

  creation(
    volumes
      .command('create')
      .description('create a volume (answers at once with state Creating; --wait polls until Available)')
      .requiredOption('--project <name>', 'project of the volume')
      .requiredOption('--name <name>', 'name, unique in the project (a-z A-Z 0-9 - _ .)')
      .requiredOption('--size <size>', 'size: bytes or a unit, e.g. 10GiB, 512MiB (KB … PB are powers of 1000)')
      .option('--compression', 'compress the volume (fixed at create: the API refuses to change it later)'),
  ).action(async (options: CreateOptions, command: Command) => {
    await createVolume(command, options, createBody(options));
  });

  creation(
    volumes
      .command('clone')
      .description('create a volume from a snapshot (its data, size, labels and compression unless given)')
      .argument('<snapshot>', 'the snapshot: UUID or name, in --project')
      .requiredOption('--name <name>', 'name of the new volume, unique in the project')
      .option('--project <name>', 'project of the snapshot and the new volume', DEFAULT_PROJECT)
      .option('--size <size>', 'size (default: the snapshot\'s; not smaller)'),
  ).action(async (snapshot: string, options: CreateOptions, command: Command) => {
    const source = isUuid(snapshot) ? { sourceSnapshotUUID: snapshot } : { sourceSnapshotName: snapshot };
    await createVolume(command, options, { ...createBody(options), ...source });
  });

  volumes
    .command('resize')
    .description('grow a volume (shrinking is not supported: the API refuses a smaller size with 400, with or without --force)')
    .argument('<volume>', 'UUID or project/name')
    .argument('<size>', 'new size: bytes or a unit, e.g. 20GiB (KB … PB are powers of 1000)')
    .option('--force', 'send Force: true (kept for scripts; a shrink is refused all the same)')
    .option('--wait', 'wait until the volume is Available again')
    .addOption(waitTimeoutOption())
    .action(async (volumeArg: string, sizeArg: string, options: { force?: boolean; wait?: boolean; waitTimeout: string }, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const size = parseSize(sizeArg);
      const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      await client.put(volumePath(volume), { size: size.toString(), ...(options.force ? { Force: true } : {}) });
      print.note(`strata: ${label(volume)}: size ${print.size(volume.size)} → ${print.size(size)}`);
      const after = options.wait ? await waitForVolumeState(client, print, volume, 'Available', waitTimeoutMs) : await client.get<Volume>(volumePath(volume));
      if (print.format === 'json') print.json(after);
      else printVolume(print, after);
    });

  volumes
    .command('rollback')
    .description('restore a volume to one of its snapshots (its data and size: a volume grown since shrinks back); the volume passes through Rollback')
    .argument('<volume>', 'UUID or project/name')
    .argument('<snapshot>', 'the snapshot: UUID or name (one of this volume\'s)')
    .option('--wait', 'wait until the volume is Available again')
    .addOption(waitTimeoutOption())
    .action(async (volumeArg: string, snapshot: string, options: { wait?: boolean; waitTimeout: string }, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      await client.put(`${volumePath(volume)}/rollback`, isUuid(snapshot) ? { srcSnapshotUUID: snapshot } : { srcSnapshotName: snapshot });
      print.note(`strata: ${label(volume)}: rolling back to snapshot ${snapshot}`);
      const after = options.wait ? await waitForVolumeState(client, print, volume, 'Available', waitTimeoutMs) : await client.get<Volume>(volumePath(volume));
      if (print.format === 'json') print.json(after);
      else printVolume(print, after);
    });

  volumes
    .command('wait')
    .description('wait until a volume is Available (--protected: and FullyProtected, e.g. after a copy\'s rebuild), with progress on stderr')
    .argument('<volume>', 'UUID or project/name')
    .option('--protected', 'also wait until its protection state is FullyProtected (every copy in sync)')
    .addOption(waitTimeoutOption())
    .action(async (volumeArg: string, options: { protected?: boolean; waitTimeout: string }, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      const after = await waitForVolumeState(client, print, volume, options.protected ? 'FullyProtected' : 'Available', waitTimeoutMs);
      if (print.format === 'json') print.json(after);
      else printVolume(print, after);
    });

  volumes
    .command('delete')
    .description('delete a volume and its data (the volume goes Deleting; --wait until it is gone)')
    .argument('<volume>', 'UUID or project/name')
    .option('--wait', 'wait until the volume is gone')
    .addOption(waitTimeoutOption())
    .action(async (volumeArg: string, options: { wait?: boolean; waitTimeout: string }, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      const answer = await client.delete<unknown>(volumePath(volume));
      if (options.wait) await waitForVolumeGone(client, print, volume, waitTimeoutMs);
      if (print.format === 'json') print.json(answer);
      else print.line(options.wait ? `deleted volume ${label(volume)}` : `deleting volume ${label(volume)}: state Deleting; its name is free now`);
    });

  volumes
    .command('connect-info')
    .description('print the nvme connect lines for each path of a volume')
    .argument('<volume>', 'UUID or project/name')
    .option('--host-nqn <nqn>', 'put this host NQN in the lines (default: a placeholder for the host\'s /etc/nvme/hostnqn)')
    .action(async (volumeArg: string, options: { hostNqn?: string }, command: Command) => {
      const ref = parseResourceRef(volumeArg, 'volume');
      const { client, print } = contextOf(command);
      const volume = await fetchVolume(client, ref);
      const connection = await client.get<VolumeConnection>(`${volumePath(volume)}/connection`);
      if (print.format === 'json') {
        print.json(connection);
        return;
      }
      const withHost = (line: string) => (options.hostNqn === undefined ? line : line.replace(HOST_NQN_PLACEHOLDER, options.hostNqn));
      print.line(`# volume ${label(volume)}, state ${connection.state}; subsystem ${connection.subsystemNQN}`);
      print.line(`# on the host the volume appears as ${connection.devicePath}`);
      for (const line of connection.commands.connect) print.line(withHost(line));
      for (const line of connection.commands.connectAll) print.line(`# or every volume this host may reach, through discovery: ${withHost(line)}`);
      print.line(`# connecting to the cluster subsystem ${connection.clusterSubsystem.subsystemNQN} for I/O is ${connection.clusterSubsystem.directConnect}: ${connection.clusterSubsystem.reason}`);
      if (connection.commands.connect.length === 0) print.note(`strata: volume ${label(volume)} is not placed on any node yet (state ${connection.state}): no paths to connect`);
      if (options.hostNqn !== undefined && !aclAdmits(connection.acl, options.hostNqn)) {
        print.note(`strata: warning: ${options.hostNqn} is not in the volume's ACL, so the connect will be refused; add it with \`strata volumes acl add ${volumeArg} ${options.hostNqn}\``);
      }
    });

  const acl = volumes.command('acl').description('add or remove host NQNs in a volume\'s ACL');
  for (const action of ['add', 'remove'] as const) {
    acl
      .command(action)
      .description(action === 'add' ? 'allow a host NQN to connect' : 'stop allowing a host NQN (its connections are dropped)')
      .argument('<volume>', 'UUID or project/name')
      .argument('<hostNQN>', 'the host\'s NQN (its /etc/nvme/hostnqn)')
      .action(async (volumeArg: string, hostNqn: string, _options: object, command: Command) => {
        const ref = parseResourceRef(volumeArg, 'volume');
        if (isAclPseudoValue(hostNqn)) throw new UsageError(`give a host NQN, not ${hostNqn}`);
        const context = contextOf(command);
        const after = await changeAcl(context, ref, action, hostNqn.trim());
        if (context.print.format === 'json') context.print.json(after);
        else context.print.line(`ACL of ${label(after)}: ${list(after.acl.values)}`);
      });
  }
}

interface CreateOptions {
  project: string;
  name: string;
  size?: string;
  replicas?: string;
  compression?: boolean;
  acl?: string[];
  ipAcl?: string[];
  policy?: string;
  wait?: boolean;
  waitTimeout: string;
}

/** POST the create (once: a lost answer may mean the volume exists; docs/cli.md, "Retries"), then --wait. */
async function createVolume(command: Command, options: CreateOptions, body: Record<string, unknown>): Promise<void> {
  const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
  const { client, print } = contextOf(command);
  const created = await client.post<Volume>(apiPath`/projects/${options.project}/volumes`, body);
  if (options.acl === undefined && print.format === 'table') {
    print.note(`strata: note: no --acl given, so no host may connect (ALLOW_NONE) until \`strata volumes acl add\` names one`);
  }
  if (!options.wait) {
    if (print.format === 'json') print.json(created);
    else printVolume(print, created);
    return;
  }
  print.note(`strata: created volume ${label(created)}: ${created.state}`);
  const available = await waitForVolumeState(client, print, created, 'Available', waitTimeoutMs);
  if (print.format === 'json') print.json(available);
  else printVolume(print, available);
}

/** The create request (spec 2.15), checked before anything is sent. */
function createBody(options: CreateOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { name: options.name, ...(options.size !== undefined ? { size: parseSize(options.size).toString() } : {}) };
  if (options.replicas !== undefined) {
    const replicas = Number(options.replicas);
    if (!Number.isInteger(replicas) || replicas < 1 || replicas > 3) throw new UsageError(`invalid --replicas "${options.replicas}": 1, 2 or 3`);
    body['replicaCount'] = replicas;
  }
  if (options.compression) body['compression'] = 'true';
  if (options.acl !== undefined) body['acl'] = { values: options.acl };
  if (options.ipAcl !== undefined) {
    const cidr = options.ipAcl.find((address) => address.includes('/'));
    if (cidr !== undefined) throw new UsageError(`invalid --ip-acl "${cidr}": the API takes single IP addresses, not CIDR ranges`);
    body['IPAcl'] = { values: options.ipAcl };
  }
  if (options.policy !== undefined) body[isUuid(options.policy) ? 'qosPolicyUUID' : 'qosPolicyName'] = options.policy;
  return body;
}

/** GET by UUID, or by name within a project (`…/volumes/?name=X`: one object, 404 when absent). */
export async function fetchVolume(client: ApiClient, ref: ResourceRef): Promise<Volume> {
  return ref.kind === 'uuid'
    ? client.get<Volume>(apiPath`/volumes/${ref.UUID}`)
    : client.get<Volume>(apiPath`/projects/${ref.projectName}/volumes/`, { name: ref.name });
}

function volumePath(volume: Pick<Volume, 'projectName' | 'UUID'>): string {
  return apiPath`/projects/${volume.projectName}/volumes/${volume.UUID}`;
}

/** "project/name (UUID)". */
function label(volume: Pick<Volume, 'projectName' | 'name' | 'UUID'>): string {
  return `${volume.projectName}/${volume.name} (${volume.UUID})`;
}

function aclSummary(values: readonly string[]): string {
  if (values.length === 1 && isAclPseudoValue(values[0])) return values[0];
  return values.length === 1 ? '1 host' : `${values.length} hosts`;
}

function printVolume(print: Printer, v: Volume): void {
  const primary = (node: string) => (node === v.primaryNodeUUID ? `${node} (primary)` : node);
  print.fields([
    ['UUID', v.UUID],
    ['Name', v.name],
    ['Project', v.projectName],
    ['State', v.state],
    ['Protection', v.protectionState],
    ['Size', print.rawBytes ? v.size : `${print.size(v.size)} (${v.size} bytes)`],
    ['Replicas', String(v.replicaCount)],
    ['Nodes', list(v.nodeList.map(primary))],
    ['Compression', String(v.compression)],
    ['Sector size', String(v.sectorSize)],
    ['ACL', list(v.acl.values)],
    ['IP ACL', list(v.IPAcl.values)],
    ['QoS policy', v.qosPolicyName || v.qosPolicyUUID || '-'],
    ['Labels', list(v.labels.map((l) => `${l.key}=${l.value}`))],
    ['Source snapshot', v.sourceSnapshotName || '-'],
    ['Connected hosts', list(v.connectedHosts)],
    ['Created', formatTime(v.creationTime)],
    ['ETag', v.ETag],
  ]);
}

/**
 * Read-modify-write of the ACL under If-Match (wire-conventions §5): a concurrent change makes the
 * PUT a 412 instead of being overwritten; then the volume is read again and the change re-applied
 * once. Answers the volume as read after the change.
 */
export async function changeAcl({ client, print }: CommandContext, ref: ResourceRef, action: 'add' | 'remove', hostNqn: string): Promise<Volume> {
  let volume = await fetchVolume(client, ref);
  let lost: ApiError | undefined;
  return retryLostRaces(2, async (attempt) => {
    if (attempt > 0) {
      print.note(`strata: ${label(volume)} changed meanwhile (ETag ${volume.ETag}); reading it again`);
      volume = await client.get<Volume>(volumePath(volume));
    }
    const next = nextAcl(volume, action, hostNqn);
    if (next === undefined) {
      print.note(`strata: ${hostNqn} is ${action === 'add' ? 'already' : 'not'} in the ACL of ${label(volume)}; nothing to change`);
      return volume;
    }
    try {
      await client.put(volumePath(volume), { acl: { values: next } }, volume.ETag);
      return await client.get<Volume>(volumePath(volume));
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 412)) throw err;
      lost = err;
      return LOST_RACE;
    }
  }, () => lost!);
}

/** The ACL after the change, or undefined when there is nothing to change. */
function nextAcl(volume: Volume, action: 'add' | 'remove', hostNqn: string): string[] | undefined {
  const current = volume.acl.values;
  if (action === 'add') {
    if (current.includes(hostNqn)) return undefined;
    if (current.includes(ALLOW_ANY)) {
      // Adding a host to "any host" would silently shut every other host out.
      throw new OperationError(`${label(volume)} admits any host (ALLOW_ANY); adding ${hostNqn} would admit only that host. Not changed; set the whole ACL with PUT ${volumePath(volume)} if that is what you want`);
    }
    return [...current.filter((value) => value !== ALLOW_NONE), hostNqn];
  }
  if (!current.includes(hostNqn)) return undefined;
  const rest = current.filter((value) => value !== hostNqn);
  // An empty list means "not given" to the API (the ACL would not change): no host is ALLOW_NONE.
  return rest.length > 0 ? rest : [ALLOW_NONE];
}

/** Until Available, or (FullyProtected) Available with every copy in sync; progress shows the protection and a rebuild's progress. */
async function waitForVolumeState(client: ApiClient, print: Printer, volume: Volume, target: 'Available' | 'FullyProtected', timeoutMs: number): Promise<Volume> {
  return waitFor<Volume>({
    what: `volume ${label(volume)} to become ${target}`,
    timeoutMs,
    progress: (line) => print.note(`strata: ${line}`),
    probe: async () => {
      const current = await client.get<Volume>(volumePath(volume));
      if (current.state === 'Available' && (target === 'Available' || current.protectionState === 'FullyProtected')) return { done: true, value: current };
      if (current.state === 'Failed') throw new OperationError(`volume ${label(volume)} is Failed${await failureReasonOf(client, volume)}`);
      return { done: false, state: progressOf(current) };
    },
  });
}

/** "Creating", "Available, Degraded, rebuild 42%": the state, then the protection unless it is unremarkable. */
export function progressOf(v: Pick<Volume, 'state' | 'protectionState' | 'rebuildProgress'>): string {
  const parts = [v.state];
  if (['Degraded', 'ReadOnly', 'NotAvailable'].includes(v.protectionState)) parts.push(v.protectionState);
  if (v.protectionState === 'Degraded' && v.rebuildProgress) parts.push(`rebuild ${v.rebuildProgress}%`);
  return parts.join(', ');
}

async function waitForVolumeGone(client: ApiClient, print: Printer, volume: Volume, timeoutMs: number): Promise<void> {
  await waitFor<true>({
    what: `volume ${label(volume)} to be gone`,
    timeoutMs,
    progress: (line) => print.note(`strata: ${line}`),
    probe: async () => {
      try {
        const current = await client.get<Volume>(volumePath(volume));
        return { done: false, state: current.state };
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return { done: true, value: true };
        throw err;
      }
    },
  });
}

/**
 * The reason a volume failed is in its VolumeFailed event (the volume record on the wire has no
 * field for it): "; <description>", or '' when it cannot be found.
 */
async function failureReasonOf(client: ApiClient, volume: Volume): Promise<string> {
  try {
    const { events } = await client.get<{ events: { EventName: string; Description: string; ComponentVolumesInfo: unknown }[] }>(
      apiPath`/projects/${volume.projectName}/events`,
      { limit: 100 },
    );
    const failed = events.find((e) => e.EventName === 'VolumeFailed' && JSON.stringify(e.ComponentVolumesInfo ?? null).includes(volume.UUID));
    return failed ? `: ${failed.Description}` : '; `strata events list --project ' + volume.projectName + '` may say why';
  } catch {
    return '';
  }
}
