// Issue 14 item 1: one etcd watch per agent process. A real agent daemon (fake sysfs, no kernel
// target) against a private etcd and a real control plane; etcd counts its watchers in the gauge
// etcd_debugging_mvcc_watcher_total (its Prometheus metrics, on the client URL). The agent must
// add exactly one to what the control plane holds, and take it away when it stops.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { freePort } from '../helpers/ports.js';
import { removeDir, startControlPlaneProcess, startSysfsAgent, type ControlPlaneProcess, type DaemonProcess } from '../helpers/processes.js';
import { createFakeSysfs, type FakeSysfs } from '../helpers/sysfs-fixture.js';
import { waitUntil } from '../helpers/wait.js';

const WATCHERS = /^etcd_debugging_mvcc_watcher_total (\d+)$/m;

describe('the agent daemon holds one etcd watch', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let agent: DaemonProcess | undefined;
  let sysfs: FakeSysfs;
  let agentStateDir: string;

  /** The watchers etcd holds now. */
  const watchers = async () => {
    const text = await (await fetch(`http://127.0.0.1:${etcd.clientPort}/metrics`)).text();
    const match = WATCHERS.exec(text);
    assert.ok(match, 'etcd exports etcd_debugging_mvcc_watcher_total');
    return Number(match[1]);
  };
  /** The watcher count once it has not moved for two seconds (daemons open theirs as they start). */
  const settledWatchers = async () => {
    let last = await watchers();
    let since = Date.now();
    return waitUntil(
      async () => {
        const now = await watchers();
        if (now !== last) [last, since] = [now, Date.now()];
        return Date.now() - since >= 2000 ? now : undefined;
      },
      () => `the watcher count settles (last ${last})`,
      30_000,
      200,
    );
  };

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: 'WATCHES-DATA', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: 2n ** 31n }] });
    agentStateDir = mkdtempSync(join(tmpdir(), 'strata-watches-agent-'));
  });
  after(async () => {
    await agent?.stop();
    await plane?.stop();
    await etcd?.stop();
    sysfs?.cleanup();
    if (agentStateDir) removeDir(agentStateDir);
  });

  it('adds exactly one watcher to etcd while it runs, and none once it stopped', async () => {
    const withPlane = await settledWatchers();
    assert.ok(withPlane > 0, 'the control plane watches etcd');

    const metricsPort = await freePort();
    agent = await startSysfsAgent({
      etcdEndpoint: etcd.endpoint, plane, stateDir: agentStateDir, sysfs, hostname: 'watches-host', dataDevices: 'WATCHES-DATA', extraArgs: ['--metrics-port', String(metricsPort)],
    });
    // Ready, and its control-plane session up: every part of the agent runs (the data path, pools,
    // discovery, node commands, admin endpoints, host keys).
    await waitUntil(async () => /strata_agent_control_plane_connected 1/.test(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()), 'the agent session is established', 15_000);
    await sleep(1000);
    const withAgent = await settledWatchers();
    assert.equal(withAgent - withPlane, 1, `the agent's watches: etcd went from ${withPlane} to ${withAgent} watchers`);

    assert.equal(await agent.stop(), 0);
    agent = undefined;
    assert.equal(await settledWatchers(), withPlane, 'the agent’s one watch ends with it');
  });
});
