// Roles and what they allow (wire-conventions §6). A principal's roles come from the token's
// `roles` claim, restricted to what the signing credential's project may grant.
import { errors } from '../../lib/errors.js';

export const SYSTEM_PROJECT = 'system';
export const DEFAULT_PROJECT = 'default';
export const ROLE_CLUSTER_ADMIN = 'system:cluster-admin';
export const ROLE_CLUSTER_VIEWER = 'system:cluster-viewer';

export interface Principal {
  readonly subject: string;
  /** Project of the credential that signed the token. */
  readonly credentialProject: string;
  readonly credentialName: string;
  readonly roles: readonly string[];
}

export type Access = 'read' | 'write';
export type Permission =
  /** Any valid token (e.g. /version, /clusterinfo). */
  | { readonly scope: 'authenticated' }
  /** Cluster-wide resources: nodes, servers, devices, flags, admin endpoints, /cluster. */
  | { readonly scope: 'cluster'; readonly access: Access }
  /** Resources of one project: volumes, snapshots, policies, credentials. */
  | { readonly scope: 'project'; readonly project: string; readonly access: Access };

export const permissions = {
  authenticated: { scope: 'authenticated' } as Permission,
  clusterRead: { scope: 'cluster', access: 'read' } as Permission,
  clusterWrite: { scope: 'cluster', access: 'write' } as Permission,
  projectRead: (project: string): Permission => ({ scope: 'project', project, access: 'read' }),
  projectWrite: (project: string): Permission => ({ scope: 'project', project, access: 'write' }),
};

/**
 * A credential of project P may grant only P's roles; only `system` credentials may grant
 * cluster roles or other projects' roles. Anything else in the claim is dropped, so a project
 * admin who uploads a key cannot mint cluster-admin tokens.
 */
export function grantableRoles(credentialProject: string, claimed: readonly string[]): string[] {
  if (credentialProject === SYSTEM_PROJECT) return [...claimed];
  return claimed.filter((role) => role === `${credentialProject}:admin` || role === `${credentialProject}:viewer`);
}

export function isAllowed(principal: Principal, permission: Permission): boolean {
  const roles = new Set(principal.roles);
  if (roles.has(ROLE_CLUSTER_ADMIN)) return true;
  switch (permission.scope) {
    case 'authenticated':
      return true;
    case 'cluster':
      return permission.access === 'read' && roles.has(ROLE_CLUSTER_VIEWER);
    case 'project':
      if (roles.has(`${permission.project}:admin`)) return true;
      return permission.access === 'read' && (roles.has(ROLE_CLUSTER_VIEWER) || roles.has(`${permission.project}:viewer`));
  }
}

export function authorize(principal: Principal, permission: Permission): void {
  if (isAllowed(principal, permission)) return;
  const what =
    permission.scope === 'project'
      ? `${permission.access} access to project ${permission.project}`
      : permission.scope === 'cluster'
        ? `cluster ${permission.access} access`
        : 'access';
  throw errors.denied(`the token's roles do not allow ${what}`);
}
