import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { parseSsAll, SsConnectedHostsProbe } from './connected-hosts.js';

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
