// Stopping a child process as the launchers do (bench/api.ts, tools/local-cluster.ts): a SIGTERM
// lets it stop cleanly (a daemon hands its work over and writes a CPU profile when asked), a
// SIGKILL after a grace period makes sure it is gone, and the caller goes on only once it is.
import type { ChildProcess } from 'node:child_process';

/** SIGTERM, SIGKILL after `graceMs`; resolves once the child has exited (at once if it already had). */
export async function stopChild(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
