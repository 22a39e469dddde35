// End-to-end proof of the lab harness and of the kernel facts the data path builds on:
// QEMU guests booting Debian's kernel, emulated NVMe drives, the kernel NVMe target exporting
// one of them over NVMe/TCP through a host forward, and a second guest connecting to it.
// Guests are started once (before) and stopped by PID (after, and on process exit).
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { openSync, readSync, closeSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { labKernelLabel, script, sha256, startGuest, type Guest } from './lab/index.js';

const SERIALS = ['STRATA-E2E-0001', 'STRATA-E2E-0002'] as const;
// STRATA_E2E=0 skips the suite (machines without QEMU); otherwise a missing lab fails loudly.
const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const NVMET_PORT = 4420;

describe(`e2e lab: guests with emulated NVMe drives and the kernel NVMe/TCP target (${labKernelLabel()})`, { timeout: 300_000, skip }, () => {
  let storage: Guest | undefined;
  let initiator: Guest | undefined;

  before(async () => {
    // Both guests boot at once (one vCPU each).
    const [s, i] = await Promise.allSettled([
      startGuest({
        name: 'storage',
        nvmeDrives: SERIALS.map((serial) => ({ serial, sizeMiB: 64 })),
        hostForwards: [{ hostPort: 0, guestPort: NVMET_PORT }],
        memoryMiB: 1024,
      }),
      startGuest({ name: 'initiator', memoryMiB: 1024 }),
    ]);
    if (s.status === 'fulfilled') storage = s.value;
    if (i.status === 'fulfilled') initiator = i.value;
    for (const result of [s, i]) if (result.status === 'rejected') throw result.reason;
    console.log(`# guests ready: storage ${storage?.bootMs} ms, initiator ${initiator?.bootMs} ms`);
  }, { timeout: 180_000 });

  after(async () => {
    await Promise.all([storage?.stop(), initiator?.stop()]);
  }, { timeout: 60_000 });

  const guestsUp = (): { storage: Guest; initiator: Guest } => {
    assert.ok(storage && initiator, 'guests did not start');
    return { storage, initiator };
  };

  it('boots Debian\'s kernel with every listed module loaded', { timeout: 30_000 }, async () => {
    const { storage, initiator } = guestsUp();
    assert.deepEqual(storage.moduleLoadFailures, [], `modules failed in storage; console ${storage.consoleLog}`);
    assert.deepEqual(initiator.moduleLoadFailures, [], `modules failed in initiator; console ${initiator.consoleLog}`);
    const modules = (await storage.runOk(['cat', '/proc/modules'])).stdout;
    for (const name of ['nvmet_tcp', 'nvme_tcp', 'btrfs', 'raid456', 'dm_thin_pool', 'nf_tables', 'crc32c_generic'])
      assert.match(modules, new RegExp(`^${name} `, 'm'), `${name} not loaded`);
  });

  it('runs argument arrays verbatim, with env, cwd, stdin, exit codes and timeouts', { timeout: 60_000 }, async () => {
    const { initiator } = guestsUp();
    const args = ['a b', "it's", '$(id) `id` ; | &', 'two\nlines\n', '', '*'];
    const echoed = await initiator.runOk(['printf', '[%s]\\n', ...args]);
    assert.equal(echoed.stdout, args.map((a) => `[${a}]\n`).join(''));

    const env = await initiator.runOk(['printenv', 'STRATA_TEST'], { env: { STRATA_TEST: 'x y\nz' } });
    assert.equal(env.stdout, 'x y\nz\n');
    assert.equal((await initiator.runOk(['pwd'], { cwd: '/sys/kernel/config' })).stdout, '/sys/kernel/config\n');
    assert.equal((await initiator.runOk(['cat'], { input: 'from stdin\n' })).stdout, 'from stdin\n');

    const failed = await initiator.run(['ls', '/nonexistent']);
    assert.equal(failed.code, 2);
    assert.match(failed.stderr, /No such file/);
    assert.equal((await initiator.run(['no-such-command-strata'])).code, 127);

    await assert.rejects(initiator.run(['sleep', '300'], { timeoutMs: 1500 }), /timed out after 1500 ms/);
    // The timed-out job's process group was killed in the guest.
    let leftover = await initiator.run(['pgrep', '-x', 'sleep']);
    for (let i = 0; i < 20 && leftover.code === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      leftover = await initiator.run(['pgrep', '-x', 'sleep']);
    }
    assert.equal(leftover.code, 1, `sleep still running: ${leftover.stdout}`);
  });

  it('shows both emulated NVMe drives by serial, transport pcie', { timeout: 30_000 }, async () => {
    const { storage } = guestsUp();
    const lines = (await storage.runOk(['sh', script('nvme-controllers.sh')])).stdout.trim().split('\n');
    const controllers = lines.map((line) => {
      const [name, transport, serial, model, namespaces] = line.split('|');
      return { name, transport, serial: serial ?? '', model: model?.trim(), namespaces };
    });
    assert.equal(controllers.length, 2, lines.join('\n'));
    assert.deepEqual(controllers.map((c) => c.serial.trim()).sort(), [...SERIALS]);
    for (const c of controllers) {
      assert.equal(c.transport, 'pcie');
      assert.equal(c.serial.length, 20, `serial is space-padded to 20: ${JSON.stringify(c.serial)}`);
      assert.equal(c.model, 'QEMU NVMe Ctrl');
      assert.match(c.namespaces ?? '', /^nvme\d+n1$/);
    }
  });

  it('exports a drive with nvmet over TCP; a second guest connects, writes and reads it back', { timeout: 120_000 }, async () => {
    const { storage, initiator } = guestsUp();
    const uuid = randomUUID();
    const nqn = `nqn.2024-01.io.strata:e2e:${uuid}`;
    const hostPort = storage.hostPort(NVMET_PORT);
    const timings: string[] = [];
    const step = async <T>(label: string, fn: () => Promise<T>): Promise<T> => {
      const t = performance.now();
      const result = await fn();
      timings.push(`${label} ${Math.round(performance.now() - t)} ms`);
      return result;
    };

    const device = (await storage.runOk(['sh', script('nvme-ns-by-serial.sh'), SERIALS[1]])).stdout.trim();
    assert.match(device, /^\/dev\/nvme\d+n1$/);
    await step('export', () => storage.runOk(['sh', script('nvmet-export.sh'), nqn, '1', device, uuid, '1', String(NVMET_PORT)]));
    let connected = false;
    try {
      await step('connect', () =>
        initiator.runOk(['nvme', 'connect', '-t', 'tcp', '-a', initiator.hostAddressFromGuest, '-s', String(hostPort), '-n', nqn], { timeoutMs: 30_000 }),
      );
      connected = true;
      const namespace = (await step('find namespace', () => initiator.runOk(['sh', script('nvme-ns-by-uuid.sh'), uuid, '20']))).stdout.trim();
      assert.match(namespace, /^\/dev\/nvme\d+n\d+$/);
      const transport = await initiator.runOk(['cat', `/sys/block/${namespace.slice(5)}/device/transport`]).catch(() => undefined);
      if (transport) assert.equal(transport.stdout.trim(), 'tcp');

      const pattern = randomBytes(1024 * 1024);
      await step('write 1 MiB', () =>
        initiator.runOk(['dd', `of=${namespace}`, 'bs=1M', 'count=1', 'iflag=fullblock', 'oflag=direct', 'status=none'], { input: pattern }),
      );
      const back = await step('read 1 MiB', () => initiator.runOk(['dd', `if=${namespace}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none']));
      assert.equal(back.stdoutBytes.length, pattern.length);
      assert.equal(sha256(back.stdoutBytes), sha256(pattern), 'initiator read back different bytes');

      // The bytes are on the exported drive: in the storage guest, and in its image on the host.
      const local = await storage.runOk(['dd', `if=${device}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none']);
      assert.equal(sha256(local.stdoutBytes), sha256(pattern), 'storage guest sees different bytes on the drive');
      const image = storage.drives.find((d) => d.serial === SERIALS[1])!.image;
      const fd = openSync(image, 'r');
      const onDisk = Buffer.alloc(pattern.length);
      readSync(fd, onDisk, 0, onDisk.length, 0);
      closeSync(fd);
      assert.equal(sha256(onDisk), sha256(pattern), 'drive image differs');

      const disconnect = await step('disconnect', () => initiator.runOk(['nvme', 'disconnect', '-n', nqn]));
      connected = false;
      assert.match(disconnect.stdout, /disconnected 1 controller/);
    } finally {
      if (connected) await initiator.run(['nvme', 'disconnect', '-n', nqn]).catch(() => undefined);
      await step('teardown', () => storage.runOk(['sh', script('nvmet-teardown.sh'), nqn, '1']));
    }
    const left = await storage.runOk(['ls', '/sys/kernel/config/nvmet/subsystems', '/sys/kernel/config/nvmet/ports']);
    assert.equal(left.stdout.replace(/^\/.*:$/gm, '').trim(), '', `nvmet configfs not empty:\n${left.stdout}`);
    console.log(`# nvmet scenario: ${timings.join(', ')}`);
  });
});
