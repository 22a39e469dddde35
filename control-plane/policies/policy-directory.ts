// PolicyDirectory (volume-dependencies.ts) over etcd: how the volumes service resolves the QoS
// policy a volume names. No dependencies but etcd.
import type { Etcd3 } from 'etcd3';
import { errors } from '../../lib/errors.js';
import type { PolicyDirectory, PolicyRef } from '../volumes/volume-dependencies.js';
import { PoliciesStore } from './policies-store.js';
import { isVisibleTo } from './policy-record.js';

export class EtcdPolicyDirectory implements PolicyDirectory {
  private readonly store: PoliciesStore;

  constructor(etcd: Etcd3) {
    this.store = new PoliciesStore(etcd);
  }

  async resolve(projectName: string, ref: { UUID?: string; name?: string }): Promise<PolicyRef> {
    const UUID = ref.UUID || undefined;
    const name = ref.name || undefined;
    if (UUID === undefined && name === undefined) throw errors.invalid('give the QoS policy UUID or name');
    const byUUID = UUID === undefined ? null : await this.store.get(UUID.toLowerCase());
    if (UUID !== undefined && !byUUID) throw errors.notFound('policy', UUID);
    const byName = name === undefined ? null : await this.store.getByName(name);
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
    return (await this.store.get(policyUUID))?.record.name ?? '';
  }
}
