// Free TCP ports for servers started by tests and the local cluster.
//
// A port is picked from 10000-19999: below the kernel's ephemeral range (net.ipv4.ip_local_port_range)
// and below Strata's default volume ports (20000-31999, which a test's API port must not fall in:
// an admin endpoint there is refused). Never from the ephemeral range: a port the kernel hands out
// for listen(0) comes from the range it also uses for outgoing connections, so between our check
// and the server's bind any connect() on the machine (the many etcd, gRPC and HTTP clients of
// concurrent test files) could take it: EADDRINUSE. Here only another listener can, and the check
// binds the wildcard address so that a listener on any local address is seen. A port handed out
// is reserved for the life of the process that took it (a file named after it, holding the
// pid, in a directory shared by every process on the machine): a server a test stops and starts
// again on the same port (etcd members, control planes) keeps it meanwhile, where another test
// file's pick would otherwise take it.
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LOWEST = 10_000;
/** Strata's default volumePortMin: test servers stay below it. */
const HIGHEST = 20_000;
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  const ceiling = Math.min(ephemeralLow(), HIGHEST);
  if (ceiling - LOWEST < 1_000) return kernelPickedPort();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (ceiling - LOWEST));
    if (handedOut.has(port) || !reserve(port)) continue;
    handedOut.add(port);
    if (await bindable(port)) return port;
  }
  return kernelPickedPort();
}

const RESERVATIONS = join(tmpdir(), 'strata-test-ports');

/** Takes the port's reservation file unless a live process holds it. */
function reserve(port: number): boolean {
  const file = join(RESERVATIONS, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      mkdirSync(RESERVATIONS, { recursive: true, mode: 0o1777 });
      const fd = openSync(file, 'wx', 0o666);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return true; // no reservations here: the bind check alone
      let text: string;
      try {
        text = readFileSync(file, 'utf8').trim();
      } catch {
        return false; // taken or freed this instant: another port
      }
      // Empty: its taker has not written its pid yet.
      if (text === '' || alive(Number(text))) return false;
      try {
        unlinkSync(file);
      } catch {
        return false;
      }
    }
  }
  return false;
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '0.0.0.0', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

function kernelPickedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
