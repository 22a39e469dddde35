// The storage statistics nodes and the cluster share (spec 2.7, 2.12), from what the nodes'
// storage pools measured (NodePoolRecord, docs/datapath.md "Pool report"). One place, so a
// node's figures always add up to the cluster's.
//
//   managedPhysicalStorage            the node's data devices that are present (inventory)
//   effectivePhysicalStorage          what volumes can use: after parity and filesystem overhead
//   logicalStorage                    sum of the volume backings' sizes (provisioned)
//   logicalUsedStorage                allocated by volumes and snapshots, before compression
//   physicalUsedStorage               data on the array, after compression and sharing
//   physicalUsedStorageIncludingParity  the same with md parity / mirrors
//   freePhysicalStorage               btrfs' estimate of the data that still fits
//   compressionRatio                  logicalUsed / physicalUsed (1 while nothing is used)
//   estimatedFreeLogicalStorage       free × compressionRatio
//   estimatedLogicalStorage           logicalUsed + estimatedFreeLogical
//
// A node whose pool has not reported yet has only managedPhysicalStorage; the rest is 0.
import type { NodePoolRecord, NodeRecord } from '../../lib/records.js';
import type { InventoryView } from './inventory-view.js';
import { bytes } from './inventory-view.js';
import { int64, type StorageStatisticsWire } from './wire.js';

export interface StorageFigures {
  readonly managed: bigint;
  readonly effective: bigint;
  readonly logical: bigint;
  readonly logicalUsed: bigint;
  readonly physicalUsed: bigint;
  readonly physicalUsedIncludingParity: bigint;
  readonly free: bigint;
}

export const NO_STORAGE: StorageFigures = { managed: 0n, effective: 0n, logical: 0n, logicalUsed: 0n, physicalUsed: 0n, physicalUsedIncludingParity: 0n, free: 0n };

export function nodeStorageFigures(view: InventoryView, node: NodeRecord): StorageFigures {
  const managed = view.managedStorageOfNode(node);
  const pool: NodePoolRecord | undefined = view.snapshot.nodePools.get(node.UUID)?.record;
  if (!pool) return { ...NO_STORAGE, managed };
  return {
    managed,
    effective: bytes(pool.capacityBytes),
    logical: bytes(pool.provisionedBytes),
    logicalUsed: bytes(pool.logicalUsedBytes),
    physicalUsed: bytes(pool.physicalUsedBytes),
    physicalUsedIncludingParity: bytes(pool.physicalUsedIncludingParityBytes),
    free: bytes(pool.freeBytes),
  };
}

export function addStorageFigures(a: StorageFigures, b: StorageFigures): StorageFigures {
  return {
    managed: a.managed + b.managed,
    effective: a.effective + b.effective,
    logical: a.logical + b.logical,
    logicalUsed: a.logicalUsed + b.logicalUsed,
    physicalUsed: a.physicalUsed + b.physicalUsed,
    physicalUsedIncludingParity: a.physicalUsedIncludingParity + b.physicalUsedIncludingParity,
    free: a.free + b.free,
  };
}

export function storageStatisticsWire(f: StorageFigures): StorageStatisticsWire {
  // The estimates use the exact ratio; the wire ratio is rounded to two decimals.
  const estimatedFreeLogical = f.physicalUsed > 0n ? (f.free * f.logicalUsed) / f.physicalUsed : f.free;
  const ratio = f.physicalUsed > 0n ? Number((f.logicalUsed * 10_000n) / f.physicalUsed) / 10_000 : 1;
  return {
    managedPhysicalStorage: int64(f.managed),
    effectivePhysicalStorage: int64(f.effective),
    logicalStorage: int64(f.logical),
    logicalUsedStorage: int64(f.logicalUsed),
    physicalUsedStorage: int64(f.physicalUsed),
    physicalUsedStorageIncludingParity: int64(f.physicalUsedIncludingParity),
    freePhysicalStorage: int64(f.free),
    estimatedFreeLogicalStorage: int64(estimatedFreeLogical),
    estimatedLogicalStorage: int64(f.logicalUsed + estimatedFreeLogical),
    compressionRatio: Math.round(ratio * 100) / 100,
  };
}
