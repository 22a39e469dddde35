// Issue 14 item 1: one watched state per control-plane process. A real control plane, the only
// client of a private etcd, holds exactly one etcd watch once it leads and its leader tasks run
// (the API's reads, leader election, the volume controller, membership events, snapshot
// retention and the etcd corruption scanner all read the one WatchCache state). etcd's own
// gauge of open watchers counts them, so no watch of any library or component is missed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';

/** etcd's gauge of the watchers open on it (every watch of every client), in the Debian etcd (3.4). */
const WATCHERS = 'etcd_debugging_mvcc_watcher_total';
/** How long the count must hold after the leader tasks started: their starts run on (retention, membership events). */
const HOLD_MS = 3000;

async function openWatchers(etcd: TestEtcd): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${etcd.clientPort}/metrics`);
  assert.equal(res.status, 200);
  const line = (await res.text()).split('\n').find((l) => l.startsWith(`${WATCHERS} `));
  assert.ok(line, `etcd exports ${WATCHERS}`);
  return Number(line.slice(WATCHERS.length + 1));
}

describe('etcd watches of a control plane', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess | undefined;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd.stop();
  });

  it('a leading control plane with its leader tasks running holds exactly one etcd watch', async () => {
    const before = await openWatchers(etcd);
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    await plane.waitForLog((r) => r['msg'] === 'became the active cluster manager');
    // The last leader task to start (control-plane/resources.ts); then every task runs.
    await plane.waitForLog((r) => r['msg'] === 'volume controller started');
    // An API request reads the state too (after its sync() barrier).
    const res = await fetch(`${plane.apiUrl}/api/v2/volumes`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    assert.equal(res.status, 200);
    for (const deadline = Date.now() + HOLD_MS; Date.now() < deadline; await sleep(250)) {
      assert.equal((await openWatchers(etcd)) - before, 1, 'one etcd watch per control-plane process');
    }
  });
});
