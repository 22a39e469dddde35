// The QoS stage's supervisor against fake strata-ublk processes: the arguments it starts them
// with, the limits file and SIGHUP, a restart with `recover` on the same device, a new device
// when the kernel lost the old one, stopping, and refusals.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { StrataError } from '../../../lib/errors.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { EXIT_NO_UBLK, QosStage, type QosStageOptions, type ServerProcess, type StageDevice } from './qos-stage.js';

class FakeServer extends EventEmitter implements ServerProcess {
  static nextPid = 1000;
  readonly pid = FakeServer.nextPid++;
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly signals: NodeJS.Signals[] = [];

  constructor(readonly args: readonly string[]) {
    super();
  }

  kill(signal: NodeJS.Signals): boolean {
    this.signals.push(signal);
    return true;
  }

  ready(id: number): void {
    this.stdout.write(`ready id=${id} device=/dev/ublkb${id}\n`);
  }

  exit(code: number | null, signal: NodeJS.Signals | null = null): void {
    this.emit('exit', code, signal);
    this.stdout.end();
    this.stderr.end();
  }
}

/** A stage whose launches are recorded; `info`/`delete` exit at once with `oneShotStatus`. */
function harness(options: Partial<QosStageOptions> = {}) {
  const stateDir = mkdtempSync(join(tmpdir(), 'strata-qos-'));
  const launched: FakeServer[] = [];
  const oneShotStatus: Record<string, number> = { info: 0, delete: 0 };
  const replaced: [string, StageDevice][] = [];
  const stage = new QosStage({
    stateDir,
    logger: silentLogger(),
    binary: '/opt/strata/native/build/strata-ublk',
    restartBackoff: { initialMs: 5, maxMs: 20, jitter: 0 },
    onDeviceReplaced: (volume, device) => replaced.push([volume, device]),
    launch: (file, args) => {
      assert.equal(file, '/opt/strata/native/build/strata-ublk');
      const server = new FakeServer(args);
      launched.push(server);
      const command = args[0]!;
      if (command in oneShotStatus) setImmediate(() => server.exit(oneShotStatus[command]!));
      return server;
    },
    ...options,
  });
  const servers = (command: string) => launched.filter((s) => s.args[0] === command);
  /** Resolves with the next launched `command` process, once it exists. */
  const nextLaunch = async (command: string, after = servers(command).length): Promise<FakeServer> => {
    while (servers(command).length <= after) await new Promise((r) => setTimeout(r, 1));
    return servers(command)[after]!;
  };
  return { stage, stateDir, launched, servers, nextLaunch, oneShotStatus, replaced, cleanup: () => rmSync(stateDir, { recursive: true, force: true }) };
}

/** A test body given a fresh harness, whose state directory is removed afterwards. */
function withHarness(body: (h: ReturnType<typeof harness>) => Promise<void>, options: Partial<QosStageOptions> = {}): () => Promise<void> {
  return async () => {
    const h = harness(options);
    try {
      await body(h);
    } finally {
      h.cleanup();
    }
  };
}

const limits = { readIops: 300, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 2_000_000 };

/** Starts `volume` on /pool/<volume>.raw and makes the launched server ready as device `id`. */
async function served(h: ReturnType<typeof harness>, volume: string, id: number): Promise<FakeServer> {
  const starting = h.stage.start(volume, { backing: `/pool/${volume}.raw`, limits });
  const server = await h.nextLaunch('serve');
  server.ready(id);
  await starting;
  return server;
}

it('starts a server with the backing and a limits file, and answers its device once it is ready', withHarness(async (h) => {
  const starting = h.stage.start('vol-a', { backing: '/pool/vol-a.raw', limits });
  const server = await h.nextLaunch('serve');
  const limitsPath = join(h.stateDir, 'vol-a.limits');
  assert.deepEqual(server.args, ['serve', '/pool/vol-a.raw', '--limits', limitsPath]);
  assert.equal(readFileSync(limitsPath, 'utf8'), 'read-iops 300\nwrite-iops 0\nread-bps 0\nwrite-bps 2000000\n');
  server.ready(4);
  assert.deepEqual(await starting, { id: 4, device: '/dev/ublkb4' });
  assert.deepEqual(h.stage.device('vol-a'), { id: 4, device: '/dev/ublkb4' });

  const buffered = h.stage.start('vol-z', { backing: '/pool/vol-z.zst', limits, buffered: true });
  (await h.nextLaunch('serve', 1)).ready(5);
  await buffered;
  assert.deepEqual(h.servers('serve')[1]!.args.slice(-1), ['--buffered']);
}));

it('changes limits live: the file, then SIGHUP; starting a served volume again only does that', withHarness(async (h) => {
  const server = await served(h, 'vol-a', 0);
  await h.stage.setLimits('vol-a', { ...limits, readIops: 150 });
  assert.match(readFileSync(join(h.stateDir, 'vol-a.limits'), 'utf8'), /^read-iops 150$/m);
  assert.deepEqual(server.signals, ['SIGHUP']);
  assert.deepEqual(await h.stage.start('vol-a', { backing: '/pool/vol-a.raw', limits: { ...limits, readIops: 0 } }), { id: 0, device: '/dev/ublkb0' });
  assert.deepEqual(server.signals, ['SIGHUP', 'SIGHUP']);
  assert.equal(h.servers('serve').length, 1);

  // Two starts at once launch one server; the second only sets its limits.
  const first = h.stage.start('vol-c', { backing: '/pool/vol-c.raw', limits });
  const second = h.stage.start('vol-c', { backing: '/pool/vol-c.raw', limits });
  (await h.nextLaunch('serve', 1)).ready(9);
  assert.deepEqual(await Promise.all([first, second]), [{ id: 9, device: '/dev/ublkb9' }, { id: 9, device: '/dev/ublkb9' }]);
  assert.equal(h.servers('serve').length, 2);
  await assert.rejects(h.stage.setLimits('vol-b', limits), (e: unknown) => e instanceof StrataError && e.code === 'NOT_FOUND');
}));

it('restarts a server that died with `recover` on the same device, with the current limits file', withHarness(async (h) => {
  const first = await served(h, 'vol-a', 7);
  first.exit(null, 'SIGKILL');
  const recovering = await h.nextLaunch('recover');
  assert.deepEqual(recovering.args, ['recover', '7', '/pool/vol-a.raw', '--limits', join(h.stateDir, 'vol-a.limits')]);
  recovering.ready(7);
  await new Promise((r) => setTimeout(r, 5));
  await h.stage.setLimits('vol-a', limits);
  assert.deepEqual(recovering.signals, ['SIGHUP'], 'SIGHUP goes to the new process');
  assert.deepEqual(first.signals, []);

  // It dies again and the first recover fails while the device is still there: tried again.
  recovering.exit(1);
  const failing = await h.nextLaunch('recover', 1);
  failing.exit(1);
  const again = await h.nextLaunch('recover', 2);
  again.ready(7);
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(h.servers('serve').length, 1, 'never a new device while the kernel keeps the old one');
  assert.deepEqual(h.replaced, []);
}));

it('serves a new device when the kernel lost the old one, and tells the caller', withHarness(async (h) => {
  const first = await served(h, 'vol-a', 2);
  h.oneShotStatus['info'] = 1; // `info 2`: no such device
  first.exit(1);
  (await h.nextLaunch('recover')).exit(1);
  const fresh = await h.nextLaunch('serve', 1);
  fresh.ready(3);
  await new Promise((r) => setTimeout(r, 5));
  assert.deepEqual(h.replaced, [['vol-a', { id: 3, device: '/dev/ublkb3' }]]);
  assert.deepEqual(h.stage.device('vol-a'), { id: 3, device: '/dev/ublkb3' });
}));

it('stops with SIGTERM and never restarts a server it stopped; one that ignores SIGTERM is killed and its device deleted', withHarness(async (h) => {
  const server = await served(h, 'vol-a', 1);
  const stopping = h.stage.stop('vol-a');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(server.signals, ['SIGTERM']);
  server.exit(0);
  await stopping;
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(h.servers('recover').length, 0);
  assert.equal(existsSync(join(h.stateDir, 'vol-a.limits')), false);
  assert.equal(h.stage.device('vol-a'), undefined);

  const again = h.stage.start('vol-b', { backing: '/pool/vol-b.raw', limits });
  const stubborn = await h.nextLaunch('serve', 1);
  stubborn.ready(2);
  await again;
  const killing = h.stage.stop('vol-b');
  while (!stubborn.signals.includes('SIGKILL')) await new Promise((r) => setTimeout(r, 1));
  stubborn.exit(null, 'SIGKILL');
  await killing;
  assert.deepEqual(stubborn.signals, ['SIGTERM', 'SIGKILL']);
  assert.deepEqual(h.servers('delete').map((s) => s.args), [['delete', '2']]);
  assert.equal(h.servers('recover').length, 0);
}, { stopTimeoutMs: 20 }));

it('a stop during a restart deletes the device and restarts nothing more', withHarness(async (h) => {
  const first = await served(h, 'vol-a', 6);
  first.exit(null, 'SIGKILL');
  const recovering = await h.nextLaunch('recover');
  await h.stage.stop('vol-a');
  assert.deepEqual(h.servers('delete').map((s) => s.args), [['delete', '6']]);
  recovering.exit(1); // the delete aborted it
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(h.servers('recover').length, 1);
  assert.equal(h.servers('serve').length, 1);
}));

it('refuses plainly: no ublk in the kernel, a server that fails or never gets ready, bad limits', withHarness(async (h) => {
  const noUblk = h.stage.start('vol-a', { backing: '/pool/vol-a.raw', limits });
  const server = await h.nextLaunch('serve');
  server.stderr.write('strata-ublk: ublk is missing: /dev/ublk-control: No such file or directory\n');
  await new Promise((r) => setImmediate(r));
  server.exit(EXIT_NO_UBLK);
  await assert.rejects(noUblk, (e: unknown) => e instanceof StrataError && e.code === 'KERNEL_CAPABILITY_MISSING' && /ublk is missing/.test(e.message));
  assert.equal(h.stage.device('vol-a'), undefined);

  const failing = h.stage.start('vol-a', { backing: '/pool/absent', limits });
  const broken = await h.nextLaunch('serve', 1);
  broken.stderr.write('strata-ublk: backing /pool/absent: No such file or directory\n');
  await new Promise((r) => setImmediate(r));
  broken.exit(1);
  await assert.rejects(failing, /status 1\) before it was ready: backing \/pool\/absent/);
  assert.equal(existsSync(join(h.stateDir, 'vol-a.limits')), false, 'a start that failed leaves no limits file');

  const slow = h.stage.start('vol-a', { backing: '/pool/vol-a.raw', limits });
  const hung = await h.nextLaunch('serve', 2);
  await assert.rejects(slow, /not ready within 20 ms/);
  assert.deepEqual(hung.signals, ['SIGKILL']);

  for (const bad of [{ ...limits, readIops: -1 }, { ...limits, writeBytesPerSecond: 1.5 }]) {
    await assert.rejects(h.stage.start('vol-c', { backing: '/pool/vol-c.raw', limits: bad }), (e: unknown) => e instanceof StrataError && e.code === 'INVALID_ARGUMENT');
  }
  assert.equal(h.servers('serve').length, 3, 'bad limits launch nothing');
}, { readyTimeoutMs: 20 }));

it('a new agent adopts the server an earlier one left running, recovers a device whose server is gone, and never serves a second device', withHarness(async (h) => {
  await served(h, 'vol-a', 4);
  await served(h, 'vol-b', 5);
  assert.deepEqual(JSON.parse(readFileSync(join(h.stateDir, 'vol-a.json'), 'utf8')), { id: 4, backing: '/pool/vol-a.raw', buffered: false });
  // The agent restarts: a new stage over the same state directory. vol-a's server (pid 4242)
  // still runs; vol-b's died (its device quiesced).
  const launched: FakeServer[] = [];
  const signalled: [number, string][] = [];
  const alive = new Set([4242]);
  const again = new QosStage({
    stateDir: h.stateDir,
    logger: silentLogger(),
    binary: '/opt/strata/native/build/strata-ublk',
    adoptedPollMs: 5,
    restartBackoff: { initialMs: 5, maxMs: 20, jitter: 0 },
    isAlive: (pid) => alive.has(pid),
    commandLine: async (pid) => (pid === 4242 ? ['/opt/strata/native/build/strata-ublk', 'serve', '/pool/vol-a.raw', '--limits', 'x', ''].join('\0') : ''),
    launch: (_file, args) => {
      const server = new FakeServer(args);
      launched.push(server);
      if (args[0] === 'info') {
        setImmediate(() => {
          server.stdout.write(args[1] === '4' ? 'id=4 state=live pid=4242 queues=1 depth=64 max_io=524288 flags=0x30\n' : 'id=5 state=quiesced pid=-1 queues=1 depth=64 max_io=524288 flags=0x30\n');
          server.exit(0);
        });
      }
      return server;
    },
  });
  const realKill = process.kill;
  process.kill = ((pid: number, signal?: string | number) => {
    signalled.push([pid, String(signal)]);
    return true;
  }) as typeof process.kill;
  try {
    assert.deepEqual(await again.start('vol-a', { backing: '/pool/vol-a.raw', limits }), { id: 4, device: '/dev/ublkb4' });
    assert.deepEqual(signalled, [[4242, 'SIGHUP']], 'the adopted server re-reads its limits file');
    assert.deepEqual(again.state('vol-a'), { device: { id: 4, device: '/dev/ublkb4' }, limits, running: true });
    await again.setLimits('vol-a', { ...limits, readIops: 100 });
    assert.deepEqual(signalled.at(-1), [4242, 'SIGHUP']);

    const recovering = again.start('vol-b', { backing: '/pool/vol-b.raw', limits });
    while (!launched.some((s) => s.args[0] === 'recover')) await new Promise((r) => setTimeout(r, 1));
    const recover = launched.find((s) => s.args[0] === 'recover')!;
    assert.deepEqual(recover.args.slice(0, 3), ['recover', '5', '/pool/vol-b.raw']);
    recover.ready(5);
    assert.deepEqual(await recovering, { id: 5, device: '/dev/ublkb5' });
    assert.equal(launched.filter((s) => s.args[0] === 'serve').length, 0, 'no second device over either backing');

    // The adopted server dies: the stage sees it by its pid and recovers the device.
    alive.delete(4242);
    while (!launched.some((s) => s.args[0] === 'recover' && s.args[1] === '4')) await new Promise((r) => setTimeout(r, 2));
    assert.equal(again.state('vol-a')?.running, false);
    launched.find((s) => s.args[0] === 'recover' && s.args[1] === '4')!.ready(4);
    while (!again.state('vol-a')?.running) await new Promise((r) => setTimeout(r, 2));
    const stopping = again.stopAll();
    await new Promise((r) => setTimeout(r, 5));
    for (const server of launched.filter((s) => s.signals.includes('SIGTERM'))) server.exit(0);
    await stopping;
    assert.equal(existsSync(join(h.stateDir, 'vol-a.json')), false);
  } finally {
    process.kill = realKill;
  }
}));
