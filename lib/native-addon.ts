// The native addon (native/, `npm run build:native`): the few system calls Node cannot make.
// Loaded on first use, once per path; every caller has a fallback for when it was not built
// (or was built for another platform), so a missing addon costs speed or precision, never a
// feature.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { packageRoot } from './paths.js';

export interface NativeAddon {
  /** Sends one datagram to socketPath (default: getenv NOTIFY_SOCKET); false if there is none. Throws with errno. */
  notify(state: string, socketPath?: string): boolean;
  /** Sets FS_NOCOW_FL on a (still empty) file. Throws with errno (ENOTTY/EOPNOTSUPP off btrfs). */
  setNoCow(path: string): void;
  /** FICLONE: `destination` (existing; truncated) shares all of `source`'s extents. Rejects with errno. */
  cloneFile(source: string, destination: string): Promise<void>;
  /** The device-mapper device's live table as `dmsetup table` prints it; '' when there is no such device. */
  dmTable(name: string): Promise<string>;
  /** Loads the table (lines "start length type params") inactive, then resumes: a flush suspend, the swap, the resume. */
  dmReload(name: string, table: string): Promise<void>;
  /** Attaches the file to a free loop device (LOOP_CONFIGURE: block size, read-only, direct I/O at once); resolves with its name, "loop3". */
  loopAttach(file: string, readOnly: boolean, sectorSize: number, directIo: boolean): Promise<string>;
}

/** Where `npm run build:native` puts the addon. */
export const nativeAddonPath = join(packageRoot, 'native', 'build', 'Release', 'strata_native.node');

const loaded = new Map<string, NativeAddon | null>();

/** The addon at `path`, or null when it cannot be loaded. */
export function loadNativeAddon(path: string = nativeAddonPath): NativeAddon | null {
  let addon = loaded.get(path);
  if (addon === undefined) {
    try {
      addon = createRequire(import.meta.url)(path) as NativeAddon;
    } catch {
      addon = null;
    }
    loaded.set(path, addon);
  }
  return addon;
}
