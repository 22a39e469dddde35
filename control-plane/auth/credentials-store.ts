// Where the Authenticator finds a token's public key. The control plane answers from its watch
// cache (control-plane/watch-cache/), made current by the request's sync() before any route
// runs, so a credential deleted before the request arrived is never found.
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { CredentialRecord } from '../../lib/records.js';

export interface CredentialLookup {
  /** The credential with its etcd mod_revision (the verifier caches the imported key by it). */
  credential(project: string, name: string): Versioned<CredentialRecord> | null;
}
