// Tests only: a minimal AgentReporting server that welcomes any agent and records (and acks)
// its VolumeReports, for the data path's end-to-end tests on the host and in QEMU guests.
import * as grpc from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';
import { CONTROL_PLANE_TLS_NAME, issueServerCertificate } from '../../../lib/tls/certificates.js';
import { ClusterCaStore } from '../../../lib/etcd/cluster-ca-store.js';
import { newClusterCa } from '../../../lib/tls/cluster-ca.js';
import { loadStrataProto } from '../../../lib/grpc/proto.js';
import type { AgentMessage__Output } from '../../../proto/gen/strata/v1/AgentMessage.js';
import type { AgentReportingHandlers } from '../../../proto/gen/strata/v1/AgentReporting.js';
import type { VolumeReport__Output } from '../../../proto/gen/strata/v1/VolumeReport.js';
import type { VolumeStatus__Output } from '../../../proto/gen/strata/v1/VolumeStatus.js';
import { waitUntil } from '../../helpers/wait.js';

export interface FakeControlPlane {
  readonly endpoint: string;
  readonly port: number;
  readonly reports: VolumeReport__Output[];
  /** Whether VolumeReports are acknowledged. */
  ack: boolean;
  /** The status of a volume in the latest report. */
  latest(volumeUUID: string): VolumeStatus__Output | undefined;
  /**
   * Resolves once a report from `sinceReport` on said the volume is Absent. Every report is
   * looked at, not just the latest: once acknowledged, the Absent entry leaves the next report.
   */
  waitAbsent(volumeUUID: string, sinceReport: number, timeoutMs?: number): Promise<unknown>;
  /** Resolves once the latest report has the volume Served at `generation`. */
  waitServed(volumeUUID: string, generation?: number, timeoutMs?: number): Promise<unknown>;
  kill(): void;
}

/** Serves TLS with a certificate from the cluster CA in `etcd` (created when missing), as a real control plane does: agents accept nothing else. */
export async function startFakeControlPlane(etcd: Etcd3, clusterUUID: string, host = '127.0.0.1'): Promise<FakeControlPlane> {
  const ca = await new ClusterCaStore(etcd).ensure(() => newClusterCa(clusterUUID));
  const issued = await issueServerCertificate(ca, 'fake control plane', [CONTROL_PLANE_TLS_NAME]);
  const credentials = grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(issued.certificate), private_key: Buffer.from(issued.privateKey) }], false);
  const proto = loadStrataProto();
  const server = new grpc.Server();
  const reports: VolumeReport__Output[] = [];
  const plane = {
    endpoint: '',
    port: 0,
    reports,
    ack: true,
    latest: (volumeUUID: string) => reports.at(-1)?.volumes.find((v) => v.volume_uuid === volumeUUID),
    waitServed: (volumeUUID: string, generation = 1, timeoutMs = 90_000) =>
      waitUntil(
        () => plane.latest(volumeUUID)?.state === 'VOLUME_SERVED' && plane.latest(volumeUUID)?.generation === String(generation),
        () => `${volumeUUID} Served at generation ${generation} (last: ${JSON.stringify(plane.latest(volumeUUID))})`,
        timeoutMs,
        200,
      ),
    waitAbsent: (volumeUUID: string, sinceReport: number, timeoutMs = 60_000) =>
      waitUntil(
        () => reports.slice(sinceReport).some((r) => r.volumes.some((v) => v.volume_uuid === volumeUUID && v.state === 'VOLUME_ABSENT')),
        () => `${volumeUUID} reported Absent (last: ${JSON.stringify(plane.latest(volumeUUID))})`,
        timeoutMs,
        100,
      ),
    kill: () => server.forceShutdown(),
  };
  const handlers: AgentReportingHandlers = {
    Session: (call) => {
      call.on('data', (message: AgentMessage__Output) => {
        if (message.body === 'hello') call.write({ welcome: { control_plane_instance: 'fake', cluster_uuid: clusterUUID } });
        if (message.body === 'volume_report' && message.volume_report) {
          reports.push(message.volume_report);
          if (plane.ack) call.write({ volume_report_ack: { sequence: message.volume_report.sequence } });
        }
      });
      call.on('error', () => undefined);
      call.on('end', () => call.end());
    },
  };
  server.addService(proto.strata.v1.AgentReporting.service, handlers);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:0`, credentials, (err, p) => (err ? reject(err) : resolve(p))),
  );
  return Object.assign(plane, { endpoint: `${host}:${port}`, port });
}
