// ProjectDirectory (volume-dependencies.ts) over etcd: what the volumes service asks of
// projects. No dependencies but etcd, so it can be built before the services that need it.
import type { Etcd3 } from 'etcd3';
import { errors } from '../../lib/errors.js';
import type { ProjectDirectory } from '../volumes/volume-dependencies.js';
import { POLICY_TYPE_QOS } from './projects-schema.js';
import { ProjectsStore } from './projects-store.js';

export class EtcdProjectDirectory implements ProjectDirectory {
  private readonly store: ProjectsStore;

  constructor(etcd: Etcd3) {
    this.store = new ProjectsStore(etcd);
  }

  async require(projectName: string): Promise<void> {
    if (!(await this.store.get(projectName))) throw errors.notFound('project', projectName);
  }

  async defaultQosPolicyUUID(projectName: string): Promise<string> {
    const project = await this.store.get(projectName);
    if (!project) throw errors.notFound('project', projectName);
    return (project.record.defaultPolicies ?? []).find((p) => p.policyType === POLICY_TYPE_QOS)?.policyUUID ?? '';
  }
}
