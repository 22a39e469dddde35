import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { describe, it } from 'node:test';
import { loadAgentConfig } from './config.js';

describe('agent config', () => {
  it('has lab defaults; failureDomain defaults to the hostname', () => {
    const config = loadAgentConfig({ argv: [], env: {} });
    assert.deepEqual(config.etcdEndpoints, ['127.0.0.1:2379']);
    assert.deepEqual(config.controlPlaneEndpoints, ['127.0.0.1:7443']);
    assert.equal(config.stateDir, '/var/lib/strata/agent');
    assert.equal(config.sysfsRoot, '/sys');
    assert.equal(config.advertiseAddress, '127.0.0.1');
    assert.equal(config.nvmePort, 4420);
    assert.equal(config.discoveryPort, 8009);
    assert.equal(config.leaseTtlSeconds, 5);
    assert.equal(config.heartbeatSeconds, 5);
    assert.equal(config.inventoryRescanSeconds, 30);
    assert.equal(config.nodesPerServer, 1);
    assert.equal(config.maxNvmeDevices, 32);
    assert.deepEqual(config.dataDevices, []);
    assert.equal(config.journalDevice, '');
    assert.equal(config.hostname, hostname());
    assert.equal(config.failureDomain, hostname());
    assert.ok(Object.isFrozen(config));
  });

  it('takes lists and numbers from the environment and flags (flags win)', () => {
    const config = loadAgentConfig({
      argv: ['--lease-ttl-seconds', '4', '--hostname', 'h1'],
      env: {
        STRATA_ETCD_ENDPOINTS: '10.0.0.1:2379, 10.0.0.2:2379',
        STRATA_LEASE_TTL_SECONDS: '7',
        STRATA_DATA_DEVICES: 'S1,S2',
      },
    });
    assert.deepEqual(config.etcdEndpoints, ['10.0.0.1:2379', '10.0.0.2:2379']);
    assert.equal(config.leaseTtlSeconds, 4);
    assert.deepEqual(config.dataDevices, ['S1', 'S2']);
    assert.equal(config.failureDomain, 'h1', 'follows the hostname override');
  });

  it('rejects bad values', () => {
    assert.throws(() => loadAgentConfig({ argv: ['--lease-ttl-seconds', '1'], env: {} }), /leaseTtlSeconds/);
    assert.throws(() => loadAgentConfig({ argv: ['--etcd-endpoints', 'no-port'], env: {} }), /expected host:port/);
    assert.throws(() => loadAgentConfig({ argv: ['--control-plane-endpoints', ''], env: {} }), /at least one endpoint/);
    assert.throws(
      () => loadAgentConfig({ argv: ['--data-devices', 'A,B', '--journal-device', 'A'], env: {} }),
      /journalDevice A is also listed in dataDevices/,
    );
  });
});
