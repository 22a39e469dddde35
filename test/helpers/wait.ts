// Polling helper for the agent's tests: waits until a condition holds or fails with a message.
import { setTimeout as sleep } from 'node:timers/promises';

/** Thrown by a probe when waiting cannot help (a terminal state): waitUntil rethrows it at once. */
export class FatalWaitError extends Error {}

export async function waitUntil<T>(
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  /** What is awaited; a function is asked at the timeout (to describe the last state seen). */
  what: string | (() => string),
  timeoutMs = 10_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      if (err instanceof FatalWaitError) {
        err.message += `\n(while waiting for ${typeof what === 'function' ? what() : what})`;
        throw err;
      }
      lastError = err;
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}${detail}`);
    }
    await sleep(intervalMs);
  }
}
