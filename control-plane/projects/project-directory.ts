// ProjectDirectory (volume-dependencies.ts) over the watch cache: what the volumes service asks
// of projects, answered from memory (the request's sync() made the cache current).
import { errors } from '../../lib/errors.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import type { ProjectDirectory } from '../volumes/volume-dependencies.js';
import { defaultQosPolicyUUID } from '../policies/volume-qos.js';

export class WatchedProjectDirectory implements ProjectDirectory {
  constructor(private readonly cache: WatchCache) {}

  async require(projectName: string): Promise<void> {
    if (!this.cache.project(projectName)) throw errors.notFound('project', projectName);
  }

  async defaultQosPolicyUUID(projectName: string): Promise<string> {
    const project = this.cache.project(projectName);
    if (!project) throw errors.notFound('project', projectName);
    return defaultQosPolicyUUID(project.record);
  }
}
