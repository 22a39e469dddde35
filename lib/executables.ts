// Finding a program before running it: a command this server does not have is reported as
// absent (by name), instead of failing with a spawn error somewhere later.
import { constants as fsConstants, promises as fs } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The program's path on PATH (or the sbin directories), or undefined when it is not installed. */
export async function which(command: string): Promise<string | undefined> {
  const dirs = (process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(delimiter);
  for (const dir of [...dirs, '/usr/sbin', '/sbin']) {
    if (!dir) continue;
    const path = join(dir, command);
    try {
      await fs.access(path, fsConstants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  return undefined;
}
