// A TCP proxy between a client and a server, for injecting network faults (as microsoft/etcd3's
// tests do): `cut()` drops every connection and refuses new ones until `restore()`;
// `delayAnswers(ms)` holds what the server sends back for `ms` before the client gets it (in
// order), so a test sees the server's effect of a request (e.g. an etcd write) while the client is
// still waiting for the answer, and can kill the client right there; `hold()` lets nothing through
// in either direction (held in order, the connections left open) until `restore()`: a partition
// that drops packets, where a request neither arrives nor fails until the client's deadline, so
// a test can act while a client is stuck on a request (cut() refuses at once, and a client that
// fails fast moves on).
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  readonly endpoint: string;
  cut(): void;
  restore(): void;
  /** From now on, bytes from the server reach the client `ms` later (0: at once again, still in order). */
  delayAnswers(ms: number): void;
  /** Nothing passes either way from now on (held, in order, connections open) until restore(). */
  hold(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let isCut = false;
  let answerDelayMs = 0;
  let held = false;
  /** Releases what hold() kept back, on every connection (restore()). */
  const releases = new Set<() => void>();
  const server: Server = createServer((downstream) => {
    if (isCut) {
      downstream.destroy();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    sockets.add(downstream);
    sockets.add(upstream);
    const closeBoth = () => {
      downstream.destroy();
      upstream.destroy();
      sockets.delete(downstream);
      sockets.delete(upstream);
    };
    downstream.on('error', closeBoth).on('close', closeBoth);
    upstream.on('error', closeBoth).on('close', closeBoth);
    // Client to server: straight through, except while held.
    const requests: Buffer[] = [];
    downstream.on('data', (chunk: Buffer) => {
      if (held) requests.push(chunk);
      else upstream.write(chunk);
    });
    // Server to client through an ordered queue, each piece due `answerDelayMs` after it arrived.
    const queue: { due: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const flush = () => {
      timer = undefined;
      if (held) return;
      while (queue.length > 0 && queue[0]!.due <= Date.now()) downstream.write(queue.shift()!.chunk);
      if (queue.length > 0) timer = setTimeout(flush, queue[0]!.due - Date.now());
    };
    upstream.on('data', (chunk: Buffer) => {
      queue.push({ due: Date.now() + answerDelayMs, chunk });
      if (!timer) flush();
    });
    const release = () => {
      for (const chunk of requests.splice(0)) upstream.write(chunk);
      if (!timer) flush();
    };
    releases.add(release);
    upstream.on('close', () => {
      clearTimeout(timer);
      releases.delete(release);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    endpoint: `127.0.0.1:${port}`,
    cut() {
      isCut = true;
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    restore() {
      isCut = false;
      held = false;
      for (const release of releases) release();
    },
    hold() {
      held = true;
    },
    delayAnswers(ms) {
      answerDelayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
