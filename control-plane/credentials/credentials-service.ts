// Credentials (wire-conventions §6): RS256 public keys uploaded per project. A token whose
// header kid is "<project>:<name>" is verified with the key of that name; uploading one lets
// such tokens in, deleting it locks them out on their next request. `system:root`, the
// installation key, cannot be deleted: nothing else is guaranteed to mint a cluster-admin token.
import { StrataError, errors } from '../../lib/errors.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { CredentialRecord, ProjectRecord } from '../../lib/records.js';
import { SYSTEM_PROJECT } from '../auth/permissions.js';
import { ROOT_CREDENTIAL } from '../bootstrap/bootstrap.js';
import { GUARDED_ATTEMPTS } from '../../lib/etcd/transaction.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { ProjectsStore } from '../projects/projects-store.js';
import type { CreateCredentialInput } from './credentials-schema.js';
import type { CredentialRecordsStore } from './credentials-store.js';
import { normalizeRsaPublicKey } from './public-key.js';

/**
 * A credential on the wire: the reference's fields (`ID` is its name for the credential's
 * name, kept so its clients parse us) plus `name`, the spelling of wire-conventions §6. The
 * payload is the stored SPKI PEM: a public key, so there is nothing to hide.
 */
export interface CredentialWire {
  projectName: string;
  name: string;
  ID: string;
  type: 'RS256PubKey';
  payload: string;
}

export function credentialToWire(record: CredentialRecord): CredentialWire {
  return { projectName: record.project, name: record.name, ID: record.name, type: record.type, payload: record.payload };
}

export class CredentialsService {
  constructor(
    private readonly store: CredentialRecordsStore,
    private readonly projects: ProjectsStore,
  ) {}

  async list(project: string): Promise<CredentialWire[]> {
    await this.requireProject(project);
    return (await this.store.list(project)).map((c) => credentialToWire(c.record));
  }

  async get(project: string, name: string): Promise<{ credential: CredentialWire; etag: string }> {
    await this.requireProject(project);
    const stored = await this.require(project, name);
    return { credential: credentialToWire(stored.record), etag: stored.revision };
  }

  async create(project: string, input: CreateCredentialInput): Promise<{ credential: CredentialWire; etag: string }> {
    const payload = await normalizeRsaPublicKey(input.payload);
    return retryLostRaces(GUARDED_ATTEMPTS, async () => {
      const owner = await this.requireProject(project);
      if (await this.store.get(project, input.name)) throw errors.exists('credential', `${project}:${input.name}`);
      const record: CredentialRecord = { project, name: input.name, type: input.type, payload, createdAt: new Date().toISOString() };
      const result = await this.store.create(record, owner);
      return result.succeeded ? { credential: credentialToWire(record), etag: result.revision } : LOST_RACE;
    }, () => busy(`${project}:${input.name}`));
  }

  async delete(project: string, name: string, expectedRevision: string | undefined): Promise<void> {
    if (project === SYSTEM_PROJECT && name === ROOT_CREDENTIAL) {
      throw errors.invalid(`credential ${SYSTEM_PROJECT}:${ROOT_CREDENTIAL} is the installation key and cannot be deleted: it would lock the installation out`);
    }
    await this.requireProject(project);
    await retryLostRaces<void>(GUARDED_ATTEMPTS, async () => {
      const current = await this.require(project, name);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('credential', `${project}:${name}`);
      if (!(await this.store.delete(current))) return LOST_RACE;
    }, () => busy(`${project}:${name}`));
  }

  private async requireProject(project: string): Promise<Versioned<ProjectRecord>> {
    const stored = await this.projects.get(project);
    if (!stored) throw errors.notFound('project', project);
    return stored;
  }

  private async require(project: string, name: string): Promise<Versioned<CredentialRecord>> {
    const stored = await this.store.get(project, name);
    if (!stored) throw errors.notFound('credential', `${project}:${name}`);
    return stored;
  }
}

function busy(credential: string): StrataError {
  return new StrataError('OPERATION_IN_PROGRESS', `credential ${credential} is being changed by other requests; retry`);
}
