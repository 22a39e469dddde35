// QoS rate-limit policies (spec 2.14, 4.10). Create, update and delete are cluster writes;
// reading is open to every project the policy is visible to. A policy's `state` is what its
// volumes' primaries report enforcing (qos-enforcement.ts, docs/policies.md "Enforcement"):
// Active only while every volume it is in effect for reports it Enforced.
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { ProjectRecord } from '../../lib/records.js';
import { GUARDED_ATTEMPTS } from '../../lib/etcd/transaction.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { ProjectsStore } from '../projects/projects-store.js';
import { scopeIncludes, type ReadScope } from '../projects/read-scope.js';
import type { VolumeUsage } from '../volumes/volume-dependencies.js';
import { resolveQos, type CreatePolicyInput, type PolicyLookup, type UpdatePolicyInput } from './policies-schema.js';
import type { PoliciesStore } from './policies-store.js';
import { isVisibleTo, policyToWire, type PolicyRecord, type PolicyWire } from './policy-record.js';
import type { PolicyEnforcement, VolumeEnforcementWire } from './qos-enforcement.js';

/** GET of one policy: the five fields plus its ETag (the spec leaves that body open). */
export type PolicyWithEtag = PolicyWire & { ETag: string };

export class PoliciesService {
  constructor(
    private readonly store: PoliciesStore,
    private readonly projects: ProjectsStore,
    private readonly volumes: VolumeUsage,
    /** Absent (tests without agents): every policy answers its stored state, Active. */
    private readonly enforcements?: PolicyEnforcement,
  ) {}

  /** Each policy's state as its volumes' enforcement says (see the header). */
  private states(): (policy: PolicyRecord) => PolicyWire['state'] {
    const states = this.enforcements?.states();
    return (policy) => states?.get(policy.UUID) ?? policy.state;
  }

  /**
   * Policies the caller may see, filtered by UUID, name and/or projectName (visible to that
   * project). A UUID or name that matches nothing is 404, as is an unknown project.
   */
  async list(scope: ReadScope, filter: PolicyLookup): Promise<PolicyWire[]> {
    if (filter.projectName !== undefined && !(await this.projects.get(filter.projectName))) {
      throw errors.notFound('project', filter.projectName);
    }
    const matches = (await this.store.list()).filter(
      (p) =>
        (filter.UUID === undefined || p.record.UUID === filter.UUID) &&
        (filter.name === undefined || p.record.name === filter.name) &&
        (filter.projectName === undefined || isVisibleTo(p.record, filter.projectName)) &&
        visibleInScope(scope, p.record),
    );
    if (matches.length === 0 && (filter.UUID !== undefined || filter.name !== undefined)) {
      throw errors.notFound('policy', filter.UUID ?? filter.name ?? '');
    }
    const stateOf = this.states();
    return matches.map((p) => policyToWire(p.record, scope.kind === 'cluster', stateOf(p.record)));
  }

  /** One policy by UUID or name (both given must agree). Policies the caller may not see are 404. */
  async get(scope: ReadScope, lookup: PolicyLookup): Promise<PolicyWithEtag> {
    if (lookup.UUID === undefined && lookup.name === undefined) throw errors.invalid('give the policy UUID or name');
    if (lookup.projectName !== undefined && !(await this.projects.get(lookup.projectName))) {
      throw errors.notFound('project', lookup.projectName);
    }
    const policy = lookup.UUID !== undefined ? await this.store.get(lookup.UUID) : await this.store.getByName(lookup.name!);
    const id = lookup.UUID ?? lookup.name!;
    if (!policy || !visibleInScope(scope, policy.record)) throw errors.notFound('policy', id);
    if (lookup.projectName !== undefined && !isVisibleTo(policy.record, lookup.projectName)) throw errors.notFound('policy', id);
    if (lookup.name !== undefined && policy.record.name !== lookup.name) {
      throw errors.invalid(`policy ${lookup.UUID} is named ${policy.record.name}, not ${lookup.name}`);
    }
    return { ...policyToWire(policy.record, scope.kind === 'cluster', this.states()(policy.record)), ETag: policy.revision };
  }

  /**
   * The volumes the policy is in effect for and whether each enforces it (a Strata extension:
   * docs/policies.md "Enforcement"). Only volumes of projects the caller may read.
   */
  async enforcement(scope: ReadScope, uuid: string): Promise<VolumeEnforcementWire[]> {
    await this.get(scope, { UUID: uuid });
    return (this.enforcements?.volumes(uuid) ?? []).filter((v) => scopeIncludes(scope, v.projectName));
  }

  async create(input: CreatePolicyInput): Promise<PolicyWithEtag> {
    const qos = resolveQos(input.qos);
    return retryLostRaces(GUARDED_ATTEMPTS, async () => {
      if (await this.store.nameTaken(input.name)) throw errors.exists('policy', input.name);
      const scopeProjects = await this.requireProjects(qos.projectsNamesScope);
      const record: PolicyRecord = {
        UUID: randomUUID(),
        name: input.name,
        description: input.description,
        state: 'Active',
        policyVisibility: qos.policyVisibility,
        projectsNamesScope: qos.projectsNamesScope,
        limit: qos.limit,
        createdAt: new Date().toISOString(),
      };
      const result = await this.store.create(record, scopeProjects);
      return result.succeeded ? { ...policyToWire(record, true), ETag: result.revision } : LOST_RACE;
    }, () => busy(input.name));
  }

  /** Applies description and/or QoS settings; returns the new ETag. */
  async update(uuid: string, input: UpdatePolicyInput, expectedRevision: string | undefined): Promise<string> {
    return retryLostRaces(GUARDED_ATTEMPTS, async () => {
      const current = await this.require(uuid, expectedRevision);
      const qos = input.qos ? resolveQos(input.qos, current.record) : current.record;
      const record: PolicyRecord = {
        ...current.record,
        description: input.description ?? current.record.description,
        policyVisibility: qos.policyVisibility,
        projectsNamesScope: [...qos.projectsNamesScope],
        limit: { ...qos.limit },
      };
      if (JSON.stringify(record) === JSON.stringify(current.record)) return current.revision;
      const scopeProjects = await this.requireProjects(record.projectsNamesScope);
      const checkedAt = await this.store.currentRevision();
      const losing = (await this.projectsDefaultingTo(uuid)).filter((p) => !isVisibleTo(record, p));
      if (losing.length > 0) {
        throw new StrataError(
          'INVALID_STATE',
          `policy ${current.record.name} is the default policy of project(s) ${losing.join(', ')}, which this change would no longer let use it; change their default first`,
        );
      }
      const result = await this.store.update(current, record, scopeProjects, checkedAt);
      return result.succeeded ? result.revision : LOST_RACE;
    }, () => busy(uuid));
  }

  async delete(uuid: string, expectedRevision: string | undefined): Promise<void> {
    await retryLostRaces<void>(GUARDED_ATTEMPTS, async () => {
      const current = await this.require(uuid, expectedRevision);
      const checkedAt = await this.store.currentRevision();
      const [volumes, projects] = await Promise.all([this.volumes.countUsingPolicy(uuid), this.projectsDefaultingTo(uuid)]);
      const users = [
        volumes > 0 ? `${volumes} volume${volumes === 1 ? '' : 's'}` : '',
        projects.length > 0 ? `project(s) ${projects.join(', ')} as their default policy` : '',
      ].filter((s) => s !== '');
      if (users.length > 0) {
        throw new StrataError('INVALID_STATE', `policy ${current.record.name} cannot be deleted: it is used by ${users.join(' and ')}`);
      }
      if (!(await this.store.delete(current, checkedAt))) return LOST_RACE;
    }, () => busy(uuid));
  }

  private async require(uuid: string, expectedRevision: string | undefined): Promise<Versioned<PolicyRecord>> {
    const current = await this.store.get(uuid);
    if (!current) throw errors.notFound('policy', uuid);
    if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('policy', uuid);
    return current;
  }

  /** Each named project as read (its revision guards the write); 404 for the first one missing. */
  private async requireProjects(names: readonly string[]): Promise<Versioned<ProjectRecord>[]> {
    const projects = await Promise.all(names.map((name) => this.projects.get(name)));
    return projects.map((project, i) => {
      if (!project) throw errors.notFound('project', names[i]!);
      return project;
    });
  }

  private async projectsDefaultingTo(uuid: string): Promise<string[]> {
    const projects = await this.projects.list();
    return projects.filter((p) => (p.record.defaultPolicies ?? []).some((d) => d.policyUUID === uuid)).map((p) => p.record.name);
  }
}

function visibleInScope(scope: ReadScope, policy: PolicyRecord): boolean {
  return scope.kind === 'cluster' || [...scope.projects].some((project) => isVisibleTo(policy, project));
}

function busy(id: string): StrataError {
  return new StrataError('OPERATION_IN_PROGRESS', `policy ${id} is being changed by other requests; retry`);
}
