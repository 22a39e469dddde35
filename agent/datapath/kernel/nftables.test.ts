// The nftables driver against the real nft and the running kernel's nf_tables, inside a private
// network namespace (the host's firewall is never touched): the table it writes reads back as
// written, changes are element-sized, a damaged table is rebuilt, other tables are left alone,
// and the rules really refuse connections and reset established ones. Skipped where network
// namespaces or nftables are not available (not root).
import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { createNetns, type TestNetns } from '../../../test/helpers/netns.js';
import { planIpAcls, type IpAcl, type IpAclTable } from './ip-acl.js';
import { NftablesDriver, NftablesUnavailable, nftCommandsOf, parseNftTable } from './nftables.js';

const acl = (v4: string[] = [], v6: string[] = []): IpAcl => ({ restricted: true, v4, v6 });
const netns = await createNetns();
const skip = typeof netns === 'string' ? netns : false;

describe('nftables driver (real nft, private network namespace)', { skip }, () => {
  const ns = netns as TestNetns;
  const driver = new NftablesDriver({ command: ns.nft });
  after(() => ns.remove());

  const converge = async (want: IpAclTable) => {
    await driver.apply(planIpAcls(want, await driver.read()));
    const back = await driver.read();
    assert.deepEqual(planIpAcls(want, back), [], 'nothing left to change after applying');
    return back;
  };

  it('creates its table, reads it back as written, and changes only elements afterwards', async () => {
    assert.deepEqual(await driver.read(), { present: false, intact: false, ports: new Map() });
    const first: IpAclTable = new Map([[20001, acl(['127.0.0.1', '10.0.2.2'], ['2001:db8::1'])], [20002, acl()]]);
    const back = await converge(first);
    assert.deepEqual(back, { present: true, intact: true, ports: new Map([[20001, acl(['10.0.2.2', '127.0.0.1'], ['2001:db8::1'])], [20002, acl()]]) });
    const handle = tableHandle(await ns.run('nft', ['-j', 'list', 'table', 'inet', 'strata']));

    const second: IpAclTable = new Map([[20001, acl(['127.0.0.1'])], [20003, acl([], ['::1'])]]);
    const plan = planIpAcls(second, back);
    assert.ok(plan.every((c) => c.kind === 'port'), 'an intact table only gets element changes');
    await converge(second);
    assert.equal(tableHandle(await ns.run('nft', ['-j', 'list', 'table', 'inet', 'strata'])), handle, 'the table was not recreated');
    const text = (await ns.run('nft', ['list', 'table', 'inet', 'strata'])).stdout;
    assert.match(text, /tcp dport @restricted_ports ip saddr \. tcp dport != @allowed_v4 reject with tcp reset/);
    assert.match(text, /tcp dport @restricted_ports ip6 saddr \. tcp dport != @allowed_v6 reject with tcp reset/);
  });

  it('rebuilds a damaged table, recreates a deleted one, and never touches other tables', async () => {
    await ns.run('nft', ['-f', '-'], 'table inet other {\n chain c {\n  type filter hook input priority 10; policy accept;\n  tcp dport 9 drop\n }\n}\n');
    const want: IpAclTable = new Map([[20001, acl(['127.0.0.1'])]]);
    await converge(want);
    await ns.run('nft', ['add', 'rule', 'inet', 'strata', 'input', 'tcp', 'dport', '22', 'accept']);
    assert.equal((await driver.read()).intact, false, 'a foreign rule in our chain');
    await converge(want);
    await ns.run('nft', ['flush', 'chain', 'inet', 'strata', 'input']);
    assert.equal((await driver.read()).intact, false, 'our rules flushed');
    await converge(want);
    await ns.run('nft', ['delete', 'table', 'inet', 'strata']);
    assert.equal((await driver.read()).present, false);
    await converge(want);
    await converge(new Map());
    assert.equal((await driver.read()).present, false, 'no restriction left: the table is gone');
    assert.match((await ns.run('nft', ['list', 'table', 'inet', 'other'])).stdout, /tcp dport 9 drop/, 'the other table is intact');
    await ns.run('nft', ['delete', 'table', 'inet', 'other']);
  });

  it('refuses connections from addresses not allowed and resets established ones when an address is removed', { timeout: 60_000 }, async () => {
    const peer = await startPeer(ns);
    try {
      const port = 20005;
      await peer.ask(`listen ${port}`);
      await converge(new Map([[port, acl(['127.0.0.1'])]]));
      assert.match(await peer.ask(`connect ${port} 127.0.0.2 a`), /^refused ECONNREFUSED/, '127.0.0.2 is not allowed');
      assert.match(await peer.ask(`connect ${port} 127.0.0.1 b`), /^connected/);
      await converge(new Map([[port, acl(['127.0.0.1', '127.0.0.2'])]]));
      assert.match(await peer.ask(`connect ${port} 127.0.0.2 a`), /^connected/, 'allowed once added');
      assert.match(await peer.ask('echo a'), /^echoed/);
      await converge(new Map([[port, acl(['127.0.0.1'])]]));
      assert.match(await peer.ask('echo a'), /^error ECONNRESET/, 'removing the address resets its established connection');
      assert.match(await peer.ask('echo b'), /^echoed/, 'an allowed connection is not disturbed');
      await converge(new Map([[port, acl()]]));
      assert.match(await peer.ask('echo b'), /^error ECONNRESET/, 'ALLOW_NONE resets everyone');
      await converge(new Map());
      assert.match(await peer.ask(`connect ${port} 127.0.0.2 c`), /^connected/, 'unrestricted again');
    } finally {
      peer.stop();
    }
  });

  it('says why when nft is missing, and passes nft’s own message when it refuses a change', async () => {
    await assert.rejects(new NftablesDriver({ command: ['/nonexistent/nft'] }).read(), (err: Error) => err instanceof NftablesUnavailable && /nft command is not installed/.test(err.message));
    await converge(new Map([[20001, acl(['127.0.0.1'])]]));
    const missing = { kind: 'port' as const, port: 20001, add: { restricted: false, v4: [], v6: [] }, remove: { restricted: false, v4: ['10.9.9.9'], v6: [] } };
    await assert.rejects(driver.apply([missing]), /nft refused the change: Error: Could not process rule: No such file or directory$/);
    await converge(new Map());
  });
});

describe('nft JSON', () => {
  it('parses a listing and tells a foreign shape apart', () => {
    const listing = (extra: object[] = []) =>
      JSON.stringify({
        nftables: [
          { metainfo: { version: '1.0.6' } },
          { table: { family: 'inet', name: 'strata', handle: 1 } },
          ...nftCommandsOf([{ kind: 'create', replace: false, ports: new Map([[20001, acl(['127.0.0.1'], ['2001:DB8::1'])]]) }])
            .map((c) => (c as { add: Record<string, Record<string, unknown>> }).add)
            .filter((body) => !('table' in body) && !('element' in body)),
          ...extra,
        ].map((item) => {
          const set = (item as { set?: { name: string } }).set;
          if (set?.name === 'restricted_ports') return { set: { ...set, elem: [20001] } };
          if (set?.name === 'allowed_v4') return { set: { ...set, elem: [{ concat: ['127.0.0.1', 20001] }] } };
          if (set?.name === 'allowed_v6') return { set: { ...set, elem: [{ concat: ['2001:DB8:0::1', 20001] }] } };
          return item;
        }),
      });
    assert.deepEqual(parseNftTable(listing()), { present: true, intact: true, ports: new Map([[20001, acl(['127.0.0.1'], ['2001:db8::1'])]]) });
    assert.equal(parseNftTable(listing([{ map: { name: 'm' } }])).intact, false);
    assert.equal(parseNftTable(listing([{ chain: { name: 'output', type: 'filter', hook: 'output', prio: 0, policy: 'accept' } }])).intact, false);
  });
});

function tableHandle(out: { stdout: string }): number {
  const items = (JSON.parse(out.stdout) as { nftables: { table?: { handle: number } }[] }).nftables;
  return items.find((i) => i.table)!.table!.handle;
}

/**
 * A node process in the namespace holding an echo server and named client connections,
 * driven by lines on stdin: `listen P`, `connect P SOURCE NAME`, `echo NAME`.
 */
async function startPeer(ns: TestNetns): Promise<{ ask(line: string): Promise<string>; stop(): void }> {
  const script = `
    import net from 'node:net';
    import { createInterface } from 'node:readline';
    const clients = new Map();
    const say = (s) => process.stdout.write(s + '\\n');
    for await (const line of createInterface({ input: process.stdin })) {
      const [cmd, a, b, c] = line.split(' ');
      if (cmd === 'listen') {
        const server = net.createServer((s) => { s.on('data', (d) => s.write(d)); s.on('error', () => {}); });
        server.listen(Number(a), '0.0.0.0', () => say('listening'));
      } else if (cmd === 'connect') {
        clients.get(c)?.destroy();
        const sock = net.connect({ port: Number(a), host: '127.0.0.1', localAddress: b });
        let connected = false;
        sock.once('connect', () => { connected = true; clients.set(c, sock); say('connected'); });
        sock.once('error', (e) => { if (!connected) say('refused ' + e.code); });
      } else if (cmd === 'echo') {
        const sock = clients.get(a);
        if (!sock || sock.destroyed) { say('error closed'); continue; }
        const timer = setTimeout(() => done('error timeout'), 10000);
        const done = (s) => { clearTimeout(timer); sock.removeAllListeners('data'); sock.removeAllListeners('error'); say(s); };
        sock.once('data', () => done('echoed'));
        sock.once('error', (e) => done('error ' + e.code));
        sock.write('ping');
      }
    }`;
  const child: ChildProcessWithoutNullStreams = spawn('nsenter', [`--net=/run/netns/${ns.name}`, process.execPath, '--input-type=module', '-e', script]);
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return {
    ask: async (line) => {
      child.stdin.write(`${line}\n`);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer to ${line}: ${stderr}`)), 20_000)));
      const next = await Promise.race([lines.next(), timeout]).finally(() => clearTimeout(timer));
      assert.ok(!next.done, `the peer exited: ${stderr}`);
      return next.value as string;
    },
    stop: () => child.kill('SIGKILL'),
  };
}
