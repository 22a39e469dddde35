// A private network namespace for tests that need the real kernel's networking (nftables,
// sockets) without touching the host's: `ip netns add`, commands run through `nsenter --net`.
// Needs root and a kernel with network namespaces; createNetns() says why when it cannot.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export interface TestNetns {
  readonly name: string;
  /** The nft command in the namespace, for NftablesDriver's `command`. */
  readonly nft: readonly string[];
  /** Runs a command in the namespace (argument array, no shell); rejects on a non-zero exit. */
  run(command: string, args: readonly string[], input?: string): Promise<{ stdout: string; stderr: string }>;
  remove(): Promise<void>;
}

/** A new namespace with `lo` up, or the reason none can be made here. */
export async function createNetns(): Promise<TestNetns | string> {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  const name = `strata-test-${randomBytes(4).toString('hex')}`;
  const enter = ['nsenter', `--net=/run/netns/${name}`];
  const run = (command: string, args: readonly string[], input?: string) =>
    new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
      const child = execFile(enter[0]!, [...enter.slice(1), command, ...args], { encoding: 'utf8', timeout: 30_000 }, (err, stdout, stderr) =>
        err ? reject(Object.assign(err, { stdout, stderr })) : resolve({ stdout, stderr }),
      );
      child.stdin?.on('error', () => undefined); // exited before reading: the exit code tells
      child.stdin?.end(input ?? '');
    });
  try {
    await execFileAsync('ip', ['netns', 'add', name]);
  } catch (err) {
    return `cannot create a network namespace: ${(err as Error).message}`;
  }
  try {
    await run('ip', ['link', 'set', 'lo', 'up']);
    await run('nft', ['list', 'tables']);
  } catch (err) {
    await execFileAsync('ip', ['netns', 'delete', name]).catch(() => undefined);
    return `nftables does not work in a network namespace here: ${String((err as { stderr?: string }).stderr || (err as Error).message).trim()}`;
  }
  return {
    name,
    nft: [...enter, 'nft'],
    run,
    remove: async () => {
      await execFileAsync('ip', ['netns', 'delete', name]).catch(() => undefined);
    },
  };
}
