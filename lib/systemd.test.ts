// sd_notify against a real AF_UNIX datagram socket. Node cannot open one (that is why the
// native addon exists), so each receiver is a small python3 process that binds the socket,
// prints "bound", then prints one JSON line per datagram with the sender's PID (SO_PASSCRED).

import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  _setAddonPathForTests,
  nativeAddonPath,
  notify,
  notifyBackend,
  notifyReady,
  notifyStatus,
  notifyStopping,
  startWatchdog,
} from './systemd.js';

const RECEIVER = String.raw`
import json, os, socket, struct, sys
address = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(("\0" + address[1:]) if address.startswith("@") else address)
print("bound", flush=True)
while True:
    data, ancdata, _flags, _addr = s.recvmsg(65536, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(64))
    pid = None
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", payload[:12])[0]
        elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            for fd in struct.unpack("%di" % (len(payload) // 4), payload[: len(payload) // 4 * 4]):
                os.close(fd)  # systemd-notify's BARRIER=1 fd: closing it releases the sender
    print(json.dumps({"pid": pid, "data": data.decode()}), flush=True)
`;

interface Message {
  readonly pid: number | null;
  readonly data: string;
}

interface Receiver {
  readonly address: string;
  readonly messages: Message[];
  waitFor(data: string, timeoutMs?: number): Promise<Message>;
  close(): Promise<void>;
}

const children = new Set<ChildProcess>();
const tempDirs: string[] = [];
const savedEnv = { ...process.env };

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'strata-systemd-'));
  tempDirs.push(dir);
  return dir;
}

async function startReceiver(address: string): Promise<Receiver> {
  const child = spawn('python3', ['-c', RECEIVER, address], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const messages: Message[] = [];
  let stderr = '';
  let buffered = '';
  let waiters: Array<() => void> = [];
  const wake = (): void => {
    const current = waiters;
    waiters = [];
    for (const w of current) w();
  };
  let bound = false;
  let exited = false;
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line === 'bound') bound = true;
      else messages.push(JSON.parse(line) as Message);
    }
    wake();
  });
  const closed = new Promise<void>((resolve) =>
    child.once('close', () => {
      exited = true;
      children.delete(child);
      wake();
      resolve();
    }),
  );

  const until = async (done: () => boolean, what: string, timeoutMs: number): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (exited) throw new Error(`receiver exited while waiting for ${what}: ${stderr}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(messages)} ${stderr}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  };
  await until(() => bound, 'the receiver to bind', 10_000);

  return {
    address,
    messages,
    async waitFor(data, timeoutMs = 5_000) {
      await until(() => messages.some((m) => m.data === data), JSON.stringify(data), timeoutMs);
      return messages.find((m) => m.data === data)!;
    },
    async close() {
      if (!exited) child.kill('SIGKILL');
      await closed;
    },
  };
}

function resetEnv(): void {
  for (const key of ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID']) {
    if (savedEnv[key] === undefined) delete process.env[key];
    else process.env[key] = savedEnv[key];
  }
}

afterEach(() => {
  resetEnv();
  _setAddonPathForTests();
});

after(() => {
  for (const child of children) child.kill('SIGKILL');
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

// Must stay first: it checks that nothing loaded the addon yet.
test('without NOTIFY_SOCKET every call is a no-op and the addon is not loaded', () => {
  delete process.env['NOTIFY_SOCKET'];
  process.env['WATCHDOG_USEC'] = '1000';
  assert.equal(notifyBackend(), null);
  assert.equal(notify('READY=1'), false);
  const errors: Error[] = [];
  notifyReady((e) => errors.push(e));
  notifyStopping((e) => errors.push(e));
  notifyStatus('idle', (e) => errors.push(e));
  const stop = startWatchdog((e) => errors.push(e));
  stop();
  stop();
  assert.deepEqual(errors, []);
  assert.equal(createRequire(import.meta.url).cache[nativeAddonPath], undefined);
});

test('the native addon is built (npm run build:native)', () => {
  assert.ok(existsSync(nativeAddonPath), `${nativeAddonPath} is missing: run npm run build:native`);
});

test('notifyReady sends READY=1 to a filesystem socket, from our own PID', async () => {
  const receiver = await startReceiver(join(tempDir(), 'notify.sock'));
  try {
    process.env['NOTIFY_SOCKET'] = receiver.address;
    assert.equal(notifyBackend(), 'addon');
    const errors: Error[] = [];
    notifyReady((e) => errors.push(e));
    const message = await receiver.waitFor('READY=1');
    assert.equal(message.pid, process.pid, 'NotifyAccess=main needs the main PID as sender');
    assert.deepEqual(errors, []);
  } finally {
    await receiver.close();
  }
});

test('an abstract NOTIFY_SOCKET (@name) is reached through a leading NUL byte', async () => {
  const receiver = await startReceiver(`@strata-test-${process.pid}-${Math.random().toString(36).slice(2)}`);
  try {
    process.env['NOTIFY_SOCKET'] = receiver.address;
    notifyReady();
    notifyStatus('serving\n2 volumes');
    notifyStopping();
    await receiver.waitFor('STOPPING=1');
    assert.deepEqual(
      receiver.messages.map((m) => m.data),
      ['READY=1', 'STATUS=serving 2 volumes', 'STOPPING=1'],
    );
  } finally {
    await receiver.close();
  }
});

test('startWatchdog pings every WATCHDOG_USEC/2 until stopped', async () => {
  const receiver = await startReceiver(join(tempDir(), 'watchdog.sock'));
  try {
    process.env['NOTIFY_SOCKET'] = receiver.address;
    process.env['WATCHDOG_USEC'] = '100000'; // 100 ms: a ping every 50 ms
    process.env['WATCHDOG_PID'] = String(process.pid);
    const stop = startWatchdog();
    await sleep(400);
    stop();
    // Datagrams sent before stop() may still be on their way to the receiver's event loop.
    await sleep(100);
    const pings = receiver.messages.filter((m) => m.data === 'WATCHDOG=1').length;
    assert.ok(pings >= 3, `expected several pings, got ${pings}`);
    await sleep(200);
    assert.equal(receiver.messages.filter((m) => m.data === 'WATCHDOG=1').length, pings, 'pings after stop');
    stop();
  } finally {
    await receiver.close();
  }
});

test('startWatchdog does nothing when the watchdog is for another PID or not configured', async () => {
  const receiver = await startReceiver(join(tempDir(), 'other.sock'));
  try {
    process.env['NOTIFY_SOCKET'] = receiver.address;
    process.env['WATCHDOG_USEC'] = '20000';
    process.env['WATCHDOG_PID'] = String(process.pid + 1);
    const stopOther = startWatchdog();
    delete process.env['WATCHDOG_PID'];
    process.env['WATCHDOG_USEC'] = 'not-a-number';
    const stopBad = startWatchdog();
    delete process.env['WATCHDOG_USEC'];
    const stopUnset = startWatchdog();
    await sleep(150);
    stopOther();
    stopBad();
    stopUnset();
    assert.deepEqual(receiver.messages, []);
  } finally {
    await receiver.close();
  }
});

test('a failed send reaches onError with errno and never throws', () => {
  process.env['NOTIFY_SOCKET'] = join(tempDir(), 'nobody-listens.sock');
  const errors: Error[] = [];
  assert.equal(notify('READY=1', (e) => errors.push(e)), false);
  notifyReady(); // no handler: swallowed
  assert.equal(errors.length, 1);
  assert.equal((errors[0] as NodeJS.ErrnoException).code, 'ENOENT');
  assert.match(errors[0]!.message, /sd_notify: sendto\(.*nobody-listens\.sock\): No such file or directory/);

  process.env['NOTIFY_SOCKET'] = 'relative/path';
  notifyReady((e) => errors.push(e));
  assert.equal((errors[1] as NodeJS.ErrnoException).code, 'EAFNOSUPPORT');
});

const hasSystemdNotify = spawnSync('systemd-notify', ['--version'], { stdio: 'ignore' }).status === 0;

test(
  'without the addon, notifications go through systemd-notify',
  { skip: hasSystemdNotify ? false : 'systemd-notify is not installed' },
  async () => {
    const receiver = await startReceiver(join(tempDir(), 'fallback.sock'));
    try {
      _setAddonPathForTests(join(tempDir(), 'missing.node'));
      process.env['NOTIFY_SOCKET'] = receiver.address;
      assert.equal(notifyBackend(), 'systemd-notify');
      const errors: Error[] = [];
      notifyReady((e) => errors.push(e));
      await receiver.waitFor('READY=1');
      // No assertion on the sender PID: a privileged systemd-notify (root, as in the agent's unit)
      // claims its parent's PID in SCM_CREDENTIALS; an unprivileged one sends its own.
      await sleep(50);
      assert.deepEqual(errors, []);
    } finally {
      await receiver.close();
    }
  },
);
