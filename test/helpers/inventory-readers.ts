// InventoryReaders for tests that have a store client but no control plane: each reads a watched
// state of its own over the client (a WatchCache, as the composition root's one), made on demand
// and stopped together at the end. Tests with an API harness use its cache instead.
import { InventoryReader } from '../../control-plane/inventory/inventory-reader.js';
import { WatchCache } from '../../control-plane/watch-cache/watch-cache.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { silentLogger } from './silent-logger.js';

export class InventoryReaders {
  private readonly caches: WatchCache[] = [];

  /** A reader of a new watched state over `client` (it loads at the first read). */
  of(client: KvClient): InventoryReader {
    const cache = new WatchCache(client, silentLogger('inventory'));
    this.caches.push(cache);
    return new InventoryReader(cache);
  }

  /** Stops every state made (before the clients close). */
  async stop(): Promise<void> {
    await Promise.all(this.caches.splice(0).map((cache) => cache.stop()));
  }
}
