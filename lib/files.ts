// Durable file writes: temp file, fsync, rename, fsync the directory. A crash leaves either the
// old file or the new one, never a torn one.
import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { lstat, stat } from 'node:fs/promises';
import { dirname, basename, join } from 'node:path';

export function writeFileAtomic(path: string, content: string, mode = 0o644): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  // A temp file left by a crash may have another mode: remove it, then create exclusively.
  rmSync(temp, { force: true });
  const fd = openSync(temp, 'wx', mode);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path);
  const dirFd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

/** True when `path` exists (not following a final symlink). */
export async function pathExists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** True when `path` is a directory (following symlinks); false when it is anything else or absent. */
export async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
