import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { parseSsAll, resolveHostNqn, SsConnectedHostsProbe } from './connected-hosts.js';
import { PresentedHosts } from '../../discovery/presented-hosts.js';

describe('connected hosts from TCP sockets', () => {
  it('counts established connections to listening ports only, by peer address', () => {
    const out = [
      'LISTEN    0      128          0.0.0.0:20001        0.0.0.0:*',
      'LISTEN    0      128        127.0.0.1:20002        0.0.0.0:*',
      'LISTEN    0      128             [::]:20003           [::]:*',
      'ESTAB     0      0       10.0.0.5:20001      10.0.0.9:51234',
      'ESTAB     0      0       10.0.0.5:20001      10.0.0.9:51235',
      'ESTAB     0      0       10.0.0.5:20001     10.0.0.10:40000',
      'ESTAB     0      0   [::ffff:10.0.0.5]:20003 [::ffff:10.0.0.11]:40001',
      'ESTAB     0      0  [fe80::1%eth0]:20003  [fe80::2%eth0]:40002',
      // An outgoing connection whose ephemeral local port happens to be a volume port number.
      'ESTAB     0      0       10.0.0.5:33000      10.0.0.1:2379',
      'TIME-WAIT 0      0       10.0.0.5:20002      10.0.0.12:40003',
      'garbage',
    ].join('\n');
    assert.deepEqual(
      [...parseSsAll(out)],
      [
        [20001, ['10.0.0.10', '10.0.0.9']],
        [20003, ['10.0.0.11', 'fe80::2']],
      ],
    );
  });

  it('reads this machine’s sockets with ss', async (t) => {
    const server: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const client: Socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => client.on('connect', () => resolve()));
    t.after(() => {
      client.destroy();
      server.close();
    });
    let connections;
    try {
      connections = await new SsConnectedHostsProbe().connectionsByPort();
    } catch (err) {
      t.skip(`ss is not available: ${(err as Error).message}`);
      return;
    }
    assert.deepEqual(connections.get(port), ['127.0.0.1']);
  });
});

describe('naming the host of a connection (resolveHostNqn)', () => {
  const H1 = 'nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111';
  const H2 = 'nqn.2014-08.org.nvmexpress:uuid:22222222-2222-4222-8222-222222222222';
  const presented = (byAddress: Record<string, string[]>) => ({ presentedFrom: (a: string) => byAddress[a] ?? [] });

  it('an ACL of one host names it (the kernel admitted no other), whatever discovery saw', () => {
    assert.deepEqual(resolveHostNqn('10.0.0.9', { allowAnyHost: false, allowedHosts: [H1] }, presented({ '10.0.0.9': [H2] })), { hostNQN: H1, address: '10.0.0.9', hostNQNSource: 'acl' });
  });
  it('otherwise the one NQN presented to discovery from that address that the ACL admits', () => {
    const two = { allowAnyHost: false, allowedHosts: [H1, H2] };
    assert.deepEqual(resolveHostNqn('10.0.0.9', two, presented({ '10.0.0.9': [H2, 'nqn.2014-08.org.example:not-admitted'] })), { hostNQN: H2, address: '10.0.0.9', hostNQNSource: 'discovery' });
    assert.deepEqual(resolveHostNqn('10.0.0.9', { allowAnyHost: true, allowedHosts: [] }, presented({ '10.0.0.9': [H1] })).hostNQNSource, 'discovery');
  });
  it('not known: nothing presented, several candidates, or no discovery record at all', () => {
    const any = { allowAnyHost: true, allowedHosts: [] };
    const unknown = { hostNQN: '', address: '10.0.0.9', hostNQNSource: '' };
    assert.deepEqual(resolveHostNqn('10.0.0.9', any, presented({})), unknown);
    assert.deepEqual(resolveHostNqn('10.0.0.9', any, presented({ '10.0.0.9': [H1, H2] })), unknown);
    assert.deepEqual(resolveHostNqn('10.0.0.9', any, undefined), unknown);
  });
});

describe('host NQNs presented to discovery (PresentedHosts)', () => {
  it('remembers NQNs by address, most recent first, for the retention; bounded in addresses', () => {
    let now = 1_000;
    const hosts = new PresentedHosts(() => now, 10_000, 2);
    hosts.record('::ffff:10.0.0.9', 'nqn.a');
    now += 1;
    hosts.record('10.0.0.9', 'nqn.b');
    assert.deepEqual(hosts.presentedFrom('10.0.0.9'), ['nqn.b', 'nqn.a']);
    now += 10_000;
    assert.deepEqual(hosts.presentedFrom('10.0.0.9'), ['nqn.b'], 'nqn.a is past the retention');
    hosts.record('FD00::1', 'nqn.c');
    hosts.record('10.0.0.7', 'nqn.d');
    assert.deepEqual(hosts.presentedFrom('fd00::1'), ['nqn.c']);
    assert.deepEqual(hosts.presentedFrom('10.0.0.9'), [], 'the oldest address is forgotten past the bound');
  });
});
