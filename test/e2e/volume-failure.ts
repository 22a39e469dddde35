// Why a volume went Failed, for an e2e test's error: the API's volume has no failureReason (it is
// not on LightOS's wire), so the stored record's reason is read, with what placement saw of every
// node's pool (a placement failure is the usual cause, and the pools are what it depends on).
// The error is fatal to waitUntil: a Failed volume never becomes Available, so it stops waiting.
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { NodePoolRecord, VolumeRecord } from '../../lib/records.js';
import { FatalWaitError } from '../helpers/wait.js';

export async function volumeFailedError(etcd: Etcd3, volume: { readonly UUID: string; readonly name: string }): Promise<FatalWaitError> {
  const parse = <T>(raw: string | null): T | undefined => (raw === null ? undefined : (JSON.parse(raw) as T));
  let detail: string;
  try {
    const record = parse<VolumeRecord>(await etcd.get(keys.volume(volume.UUID)).string());
    const pools = Object.values(await etcd.getAll().prefix(keys.nodePoolsPrefix()).strings()).map((raw) => parse<NodePoolRecord>(raw)!);
    const poolLines = pools.map((p) => `node ${p.nodeUUID}: ${p.state}${p.error ? ` (${p.error})` : ''}, capacity ${p.capacityBytes}, free ${p.freeBytes}, reported ${p.reportedAt}`);
    detail = `failureReason: ${record?.failureReason ?? '(no record)'}; pools: ${poolLines.join('; ') || 'none'}`;
  } catch (err) {
    detail = `(the record could not be read: ${(err as Error).message})`;
  }
  return new FatalWaitError(`volume ${volume.name} (${volume.UUID}) Failed: ${detail}`);
}
