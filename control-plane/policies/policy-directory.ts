// PolicyDirectory (volume-dependencies.ts) over the watch cache: how the volumes service
// resolves the QoS policy a volume names, answered from memory (the request's sync() made the
// cache current).
import { errors } from '../../lib/errors.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import type { PolicyDirectory, PolicyRef } from '../volumes/volume-dependencies.js';
import { isVisibleTo, type PolicyRecord } from './policy-record.js';

export class WatchedPolicyDirectory implements PolicyDirectory {
  constructor(private readonly cache: WatchCache) {}

  async resolve(projectName: string, ref: { UUID?: string; name?: string }): Promise<PolicyRef> {
    const UUID = ref.UUID || undefined;
    const name = ref.name || undefined;
    if (UUID === undefined && name === undefined) throw errors.invalid('give the QoS policy UUID or name');
    const byUUID = UUID === undefined ? null : this.cache.policy<PolicyRecord>(UUID.toLowerCase());
    if (UUID !== undefined && !byUUID) throw errors.notFound('policy', UUID);
    const byName = name === undefined ? null : this.cache.policyNamed<PolicyRecord>(name);
    if (name !== undefined && !byName) throw errors.notFound('policy', name);
    if (byUUID && byName && byUUID.record.UUID !== byName.record.UUID) {
      throw errors.invalid(`QoS policy ${UUID} is named ${byUUID.record.name}, not ${name}`);
    }
    const policy = (byUUID ?? byName)!.record;
    if (!isVisibleTo(policy, projectName)) {
      throw errors.invalid(`QoS policy ${policy.name} (${policy.UUID}) is not available to project ${projectName}`);
    }
    return { UUID: policy.UUID, name: policy.name };
  }

  async nameOf(policyUUID: string): Promise<string> {
    if (policyUUID === '') return '';
    return this.cache.policy(policyUUID)?.record.name ?? '';
  }
}
