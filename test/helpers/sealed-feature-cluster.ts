// A control plane (child process, real etcd) with one Debian 13 server whose agent published its
// box key: the fixture of the features whose secrets reach agents sealed to them (in-band
// authentication, TLS on NVMe/TCP; lib/etcd/sealed-host-keys-store.ts).
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { KernelCapabilities } from '../../lib/contract/kernel-capabilities.js';
import { newBoxKeyPair } from '../../lib/sealed-box.js';
import { startEtcd, type TestEtcd } from './etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from './processes.js';
import { joinServer, putRecord, reportInventory } from './records.js';

export const ALL_CAPABILITIES: KernelCapabilities = { nvmetInBandAuth: true, nvmeTcpTls: true, tlshd: true, ublk: true, dmVdo: true };

export interface SealedFeatureCluster {
  readonly etcd: TestEtcd;
  readonly client: Etcd3;
  readonly plane: ControlPlaneProcess;
  /** The server's box key pair (its agent's). */
  readonly box: ReturnType<typeof newBoxKeyPair>;
  readonly serverUUID: string;
  /** Any answer: status and the body parsed (undefined when empty). */
  call(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: any }>;
  /** Everything under /strata/ as text (to look for secrets in the clear). */
  etcdDump(): Promise<string>;
  stop(): Promise<void>;
}

export async function startSealedFeatureCluster(): Promise<SealedFeatureCluster> {
  const etcd = await startEtcd();
  const client = createEtcdClient([etcd.endpoint]);
  const plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
  const box = newBoxKeyPair();
  const joined = await joinServer(client, { server: { name: 'trixie' }, nodes: [{ name: 'trixie-n' }] });
  const serverUUID = joined.server.UUID;
  await reportInventory(client, serverUUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: ALL_CAPABILITIES } });
  await putRecord(client, keys.serverBoxKey(serverUUID), { serverUUID, publicKey: box.publicKey, createdAt: new Date().toISOString() });
  return {
    etcd,
    client,
    plane,
    box,
    serverUUID,
    call: async (method, path, body, token = plane.adminToken()) => {
      const res = await fetch(`${plane.apiUrl}${path}`, {
        method,
        headers: { Authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
    etcdDump: async () => JSON.stringify(await client.getAll().prefix('/strata/').strings()),
    stop: async () => {
      await plane.stop();
      client.close();
      await etcd.stop();
      removeDir(plane.stateDir);
    },
  };
}
