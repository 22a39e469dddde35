// Which projects a caller may read, for the routes whose answer depends on it (GET /projects,
// GET /policies): a cluster role reads everything; a project role (`<p>:admin`, `<p>:viewer`)
// reads its own projects. A valid token with neither reads nothing: 403, not an empty answer,
// so a misconfigured token is noticed.
import { errors } from '../../lib/errors.js';
import { isAllowed, permissions, type Principal } from '../auth/permissions.js';

export type ReadScope =
  | { readonly kind: 'cluster' }
  | { readonly kind: 'projects'; readonly projects: ReadonlySet<string> };

const PROJECT_ROLE = /^(.+):(admin|viewer)$/;

export function readScopeOf(principal: Principal): ReadScope {
  if (isAllowed(principal, permissions.clusterRead)) return { kind: 'cluster' };
  const projects = new Set<string>();
  for (const role of principal.roles) {
    const match = PROJECT_ROLE.exec(role);
    if (match) projects.add(match[1]!);
  }
  if (projects.size === 0) throw errors.denied("the token's roles grant no cluster or project access");
  return { kind: 'projects', projects };
}

export function scopeIncludes(scope: ReadScope, project: string): boolean {
  return scope.kind === 'cluster' || scope.projects.has(project);
}
