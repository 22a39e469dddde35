// systemd service notifications (sd_notify(3)) for the daemons' Type=notify units:
// READY=1 once serving, STOPPING=1 on shutdown, STATUS= lines, and WATCHDOG=1 pings.
//
// Transport: $NOTIFY_SOCKET is an AF_UNIX datagram socket, which Node's dgram module cannot
// open (UDP only), so datagrams go through the native addon (native/, `npm run build:native`),
// sent from this process's own PID as NotifyAccess=main requires. If the addon was not built,
// each message is handed to `systemd-notify STATE` instead; that child is not the main PID,
// so the unit then needs NotifyAccess=all (the shipped units say NotifyAccess=main: build the
// addon). (A systemd-notify running with CAP_SYS_ADMIN, e.g. as root, claims its parent's PID
// in the credentials, so main happens to work there; do not rely on it.) Without
// $NOTIFY_SOCKET (not started by systemd) every call is a no-op and the addon is never loaded.
//
// No call here ever throws: a failed notification must not take a serving daemon down. Pass
// `onError` to hear about failures (this module has no logger of its own).

import { execFile } from 'node:child_process';
import { loadNativeAddon, nativeAddonPath, type NativeAddon } from './native-addon.js';

export type NotifyErrorHandler = (err: Error) => void;
export type NotifyBackend = 'addon' | 'systemd-notify';

export { nativeAddonPath };

let addonPath = nativeAddonPath;
/** undefined: not tried yet; null: could not be loaded (falls back to systemd-notify). */
let addon: NativeAddon | null | undefined;

function loadAddon(): NativeAddon | null {
  if (addon === undefined) addon = loadNativeAddon(addonPath);
  return addon;
}

function notifySocket(): string | undefined {
  const socket = process.env['NOTIFY_SOCKET'];
  return socket === undefined || socket === '' ? undefined : socket;
}

/**
 * Which transport notifications use in this process: null when $NOTIFY_SOCKET is unset
 * (nothing is sent). Loads the addon on first use; a daemon may log this at startup.
 */
export function notifyBackend(): NotifyBackend | null {
  if (notifySocket() === undefined) return null;
  return loadAddon() ? 'addon' : 'systemd-notify';
}

/**
 * Sends raw sd_notify state (newline-separated VAR=value assignments). Returns false when
 * $NOTIFY_SOCKET is unset, true when the state was sent (addon) or handed to systemd-notify.
 * Never throws; failures go to onError.
 */
export function notify(state: string, onError?: NotifyErrorHandler): boolean {
  const socket = notifySocket();
  if (socket === undefined) return false;
  const native = loadAddon();
  if (native) {
    try {
      return native.notify(state, socket);
    } catch (err) {
      onError?.(err instanceof Error ? err : new Error(String(err)));
      return false;
    }
  }
  // Argument array, no shell. The child inherits NOTIFY_SOCKET; systemd-notify (systemd >= 246)
  // waits for the manager to process the message (BARRIER=1), so the message is attributed to
  // this unit before the child exits. Messages are asynchronous here and may arrive out of order.
  execFile('systemd-notify', [state], { timeout: 10_000 }, (err) => {
    if (err) onError?.(err);
  });
  return true;
}

/** READY=1: startup finished (Type=notify units leave "activating" on this). */
export function notifyReady(onError?: NotifyErrorHandler): void {
  notify('READY=1', onError);
}

/** STOPPING=1: shutdown has begun. */
export function notifyStopping(onError?: NotifyErrorHandler): void {
  notify('STOPPING=1', onError);
}

/** STATUS=<text>: free-form one-line status shown by `systemctl status` (newlines become spaces). */
export function notifyStatus(text: string, onError?: NotifyErrorHandler): void {
  notify(`STATUS=${text.replace(/[\r\n]+/g, ' ')}`, onError);
}

/** setInterval's limit (2^31-1 ms); a longer period would fire immediately. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * Starts WATCHDOG=1 pings every WATCHDOG_USEC/2 when the unit has WatchdogSec= (systemd sets
 * WATCHDOG_USEC, and WATCHDOG_PID when the watchdog is meant for a specific process). The
 * timer is unref'd so it never keeps the process alive, and it runs on the event loop: a loop
 * stalled for the whole WatchdogSec gets the daemon restarted, which is the point. Returns a
 * stop function (idempotent); a no-op stop when there is no watchdog for this process.
 */
export function startWatchdog(onError?: NotifyErrorHandler): () => void {
  const noop = (): void => {};
  if (notifySocket() === undefined) return noop;
  const usecText = process.env['WATCHDOG_USEC'];
  if (usecText === undefined || !/^\d+$/.test(usecText)) return noop;
  const usec = Number(usecText);
  if (!Number.isSafeInteger(usec) || usec <= 0) return noop;
  const pidText = process.env['WATCHDOG_PID'];
  if (pidText !== undefined && pidText !== '' && Number(pidText) !== process.pid) return noop;

  const periodMs = Math.min(MAX_TIMER_MS, Math.max(1, Math.floor(usec / 2000)));
  notify('WATCHDOG=1', onError);
  const timer = setInterval(() => notify('WATCHDOG=1', onError), periodMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** Tests only: use another addon path (undefined: the real one) and forget the loaded addon. */
export function _setAddonPathForTests(path?: string): void {
  addonPath = path ?? nativeAddonPath;
  addon = undefined;
}
