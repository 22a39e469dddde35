// The process's one watched state, and the API's read model over it. Every reader in a control
// plane process reads the one PrefixMirror this cache holds (`state`), fed by ONE etcd watch:
// the API's requests (the typed reads of watched-state-store.ts, the store that names the keys
// mirrored), the inventory (InventoryReader), the volume controller (volume-controller-store.ts),
// leader election (the leader key), membership events, snapshot retention and the etcd
// corruption scanner (docs/decisions.md, issue 14: one watched state per process).
//
// A request reads after one barrier, sync(): a cheap linearizable read of etcd's current
// revision, then a wait until the watch has delivered it. So every read sees every write
// committed before the request arrived, wherever it was made (another control plane, an
// agent's report, a test writing etcd directly) — deleting a credential still locks its tokens
// out at once — and costs one small round trip instead of one per record. (Kubernetes' API
// server serves "consistent reads from cache" the same way.)
//
// Writes go to etcd as before, guarded by transactions on the revisions read here; a stale
// read only ever makes a guarded write fail and retry.
import { WatchedStateStore } from './watched-state-store.js';

/** How long sync() waits for the watch before it reads everything again. */
const WATCH_LAG_LIMIT_MS = 2000;

/** The watched state (its typed reads and `state`), with the barrier requests share. */
export class WatchCache extends WatchedStateStore {
  private inflight: Promise<void> | undefined;
  private queued: Promise<void> | undefined;

  /**
   * Resolves once the cache holds every write committed to etcd before this call. Concurrent
   * callers share barriers: a barrier whose revision read began before a call cannot vouch for
   * it, so such a call joins the next one (at most two are pending at any time).
   */
  sync(): Promise<void> {
    if (!this.inflight) {
      this.inflight = this.barrier().finally(() => {
        this.inflight = undefined;
      });
      return this.inflight;
    }
    this.queued ??= this.inflight
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.sync();
      });
    return this.queued;
  }

  /** The mirror's own barrier: etcd's current revision (a linearizable read), then the watch's delivery of it. */
  private barrier(): Promise<void> {
    return this.state.catchUp(WATCH_LAG_LIMIT_MS);
  }
}
