// Projects (wire-conventions §7): create, list, get, update (description, default policies),
// delete. The built-in projects `default` and `system` (created by bootstrap) cannot be
// deleted; a project that still holds volumes, snapshots or credentials, or that a policy's
// scope names, cannot be deleted either (400 INVALID_STATE saying what remains).
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { ProjectRecord } from '../../lib/records.js';
import type { PolicyRecord } from '../policies/policy-record.js';
import { isVisibleTo } from '../policies/policy-record.js';
import type { PoliciesStore } from '../policies/policies-store.js';
import type { VolumeUsage } from '../volumes/volume-dependencies.js';
import { GUARDED_ATTEMPTS } from '../../lib/etcd/transaction.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import { type CreateProjectInput, type DefaultPolicyInput, type UpdateProjectInput } from './projects-schema.js';
import type { ProjectsStore } from './projects-store.js';
import { scopeIncludes, type ReadScope } from './read-scope.js';

/** A project on the wire: the reference record plus its ETag (wire-conventions §5). */
export interface ProjectWire {
  UUID: string;
  name: string;
  description: string;
  defaultPolicies: { policyType: string; policyUUID: string }[];
  ETag: string;
}

export function projectToWire(stored: Versioned<ProjectRecord>): ProjectWire {
  const project = stored.record;
  return {
    UUID: project.UUID,
    name: project.name,
    description: project.description,
    defaultPolicies: (project.defaultPolicies ?? []).map((p) => ({ policyType: p.policyType, policyUUID: p.policyUUID })),
    ETag: stored.revision,
  };
}

export class ProjectsService {
  constructor(
    private readonly store: ProjectsStore,
    private readonly policies: PoliciesStore,
    private readonly volumes: VolumeUsage,
  ) {}

  /** The projects the caller may read: all for a cluster role, else its own. */
  async list(scope: ReadScope): Promise<ProjectWire[]> {
    const projects = await this.store.list();
    return projects.filter((p) => scopeIncludes(scope, p.record.name)).map(projectToWire);
  }

  async get(name: string): Promise<ProjectWire> {
    return projectToWire(await this.require(name));
  }

  async create(input: CreateProjectInput): Promise<ProjectWire> {
    return retryLostRaces(GUARDED_ATTEMPTS, async () => {
      if (await this.store.get(input.name)) throw errors.exists('project', input.name);
      const referenced = await this.defaultPolicies(input.name, input.defaultPolicies);
      const record: ProjectRecord = {
        UUID: randomUUID(),
        name: input.name,
        description: input.description,
        defaultPolicies: input.defaultPolicies.map((p) => ({ policyType: p.policyType, policyUUID: p.policyUUID })),
        builtIn: false,
        createdAt: new Date().toISOString(),
      };
      const result = await this.store.create(record, referenced);
      return result.succeeded ? projectToWire({ key: '', record, revision: result.revision }) : LOST_RACE;
    }, () => busy('project', input.name));
  }

  /** Updates description and/or default policies; returns the new ETag. */
  async update(name: string, input: UpdateProjectInput, expectedRevision: string | undefined): Promise<string> {
    return retryLostRaces(GUARDED_ATTEMPTS, async () => {
      const current = await this.require(name);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('project', name);
      const referenced = input.defaultPolicies === undefined ? [] : await this.defaultPolicies(name, input.defaultPolicies);
      const record: ProjectRecord = {
        ...current.record,
        description: input.description ?? current.record.description,
        defaultPolicies:
          input.defaultPolicies === undefined
            ? current.record.defaultPolicies
            : input.defaultPolicies.map((p) => ({ policyType: p.policyType, policyUUID: p.policyUUID })),
      };
      // Nothing to change: no write, so the ETag stays (a retried PUT is a no-op).
      if (JSON.stringify(record) === JSON.stringify(current.record)) return current.revision;
      const result = await this.store.update(current, record, referenced);
      return result.succeeded ? result.revision : LOST_RACE;
    }, () => busy('project', name));
  }

  async delete(name: string, expectedRevision: string | undefined): Promise<void> {
    await retryLostRaces<void>(GUARDED_ATTEMPTS, async () => {
      const current = await this.require(name);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('project', name);
      if (current.record.builtIn) throw errors.invalid(`project ${name} is built in and cannot be deleted`);
      const checkedAt = await this.store.currentRevision();
      const [volumes, snapshots, credentials, policies, trustedHosts] = await Promise.all([
        this.volumes.countInProject(name),
        this.store.countSnapshots(name),
        this.store.countCredentials(name),
        this.policies.list(),
        this.store.countTrustedHosts(name),
      ]);
      const scopedPolicies = policies.filter((p) => p.record.projectsNamesScope.includes(name)).map((p) => p.record.name);
      const remains = [
        count(volumes, 'volume'),
        count(snapshots, 'snapshot'),
        count(credentials, 'credential'),
        count(trustedHosts, 'trusted host'),
        scopedPolicies.length > 0 ? `the scope of ${count(scopedPolicies.length, 'policy', 'policies')} (${scopedPolicies.join(', ')}) names it` : '',
      ].filter((s) => s !== '');
      if (remains.length > 0) {
        throw new StrataError('INVALID_STATE', `project ${name} cannot be deleted: it still has ${remains.join(', ')}; remove them first`);
      }
      if (!(await this.store.delete(current, checkedAt))) return LOST_RACE;
    }, () => busy('project', name));
  }

  private async require(name: string): Promise<Versioned<ProjectRecord>> {
    const project = await this.store.get(name);
    if (!project) throw errors.notFound('project', name);
    return project;
  }

  /** The policies a project's defaults name: each must exist (404) and be visible to the project (400). */
  private async defaultPolicies(project: string, defaults: readonly DefaultPolicyInput[]): Promise<Versioned<PolicyRecord>[]> {
    const found: Versioned<PolicyRecord>[] = [];
    for (const entry of defaults) {
      const policy = await this.policies.get(entry.policyUUID);
      if (!policy) throw errors.notFound('policy', entry.policyUUID);
      if (!isVisibleTo(policy.record, project)) {
        throw errors.invalid(`policy ${policy.record.name} (${policy.record.UUID}) is not available to project ${project}`);
      }
      found.push(policy);
    }
    return found;
  }
}

function count(n: number, singular: string, plural = `${singular}s`): string {
  return n === 0 ? '' : `${n} ${n === 1 ? singular : plural}`;
}

function busy(what: string, name: string): StrataError {
  return new StrataError('OPERATION_IN_PROGRESS', `${what} ${name} is being changed by other requests; retry`);
}
