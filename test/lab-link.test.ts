// The e2e lab's private L2 link (test/e2e/lab/link.ts): the QEMU arguments and the guest's
// kernel command line, pure functions (no bridge, tap or guest here).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { linkAddress, linkMac, privateLinkArgs, segmentNames } from './e2e/lab/link.js';

test('linkAddress takes an IPv4 address with its prefix and refuses anything else', () => {
  assert.equal(linkAddress('192.168.77.11/24'), '192.168.77.11');
  for (const bad of ['192.168.77.11', '192.168.77.300/24', '192.168.77.1/31', 'fe80::1/64', '192.168.77.1/24,x'])
    assert.throws(() => linkAddress(bad), /private link address/, bad);
});

test('linkMac is locally administered by QEMU convention and distinct per address', () => {
  assert.equal(linkMac('192.168.77.11/24'), '52:54:00:4c:4d:0b');
  assert.notEqual(linkMac('192.168.77.12/24'), linkMac('192.168.77.11/24'));
  // Never the user network NIC's default MAC.
  assert.notEqual(linkMac('10.0.2.15/24'), '52:54:00:12:34:56');
});

test('a tap link: a tap netdev with the virtio-net header, the NIC after n0 with the MTU offered, and init\'s words', () => {
  const { qemu, append } = privateLinkArgs({ kind: 'tap', name: 'sl2-42', address: '192.168.77.12/24' }, 'sl2-42-1');
  assert.deepEqual(qemu, [
    '-netdev', 'tap,id=n1,ifname=sl2-42-1,script=no,downscript=no,vnet_hdr=on',
    '-device', 'virtio-net-pci,netdev=n1,mac=52:54:00:4c:4d:0c,host_mtu=9000',
  ]);
  assert.deepEqual(append, ['strata.l2mac=52:54:00:4c:4d:0c', 'strata.l2addr=192.168.77.12/24', 'strata.l2mtu=9000']);
  assert.throws(() => privateLinkArgs({ kind: 'tap', name: 'sl2-42', address: '192.168.77.12/24' }), /tap name/);
  assert.throws(() => privateLinkArgs({ kind: 'tap', name: 'sl2-42', address: '192.168.77.12/24' }, 'a,b'), /tap name/);
});

test('an mcast link: the socket backend on the group over 127.0.0.1; the MTU is checked', () => {
  const { qemu, append } = privateLinkArgs({ kind: 'mcast', name: '239.77.0.42:20294', address: '192.168.77.13/24', mtu: 1500 });
  assert.deepEqual(qemu, ['-netdev', 'socket,id=n1,mcast=239.77.0.42:20294,localaddr=127.0.0.1', '-device', 'virtio-net-pci,netdev=n1,mac=52:54:00:4c:4d:0d,host_mtu=1500']);
  assert.equal(append[2], 'strata.l2mtu=1500');
  assert.throws(() => privateLinkArgs({ kind: 'mcast', name: '10.0.0.1:20294', address: '192.168.77.13/24' }), /multicast/);
  assert.throws(() => privateLinkArgs({ kind: 'mcast', name: '239.77.0.42:20294', address: '192.168.77.13/24', mtu: 100 }), /MTU/);
});

test('segment interface names fit IFNAMSIZ (15 characters) for any PID', () => {
  const names = segmentNames(4194304);
  assert.ok(names.bridge.length <= 15 && names.tap(99).length <= 15, `${names.bridge} ${names.tap(99)}`);
});
