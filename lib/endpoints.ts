// "host:port" endpoints as the API shows them (IPv6 hosts in brackets), in one place.
import { isIP } from 'node:net';

/** Formats host:port, bracketing IPv6 literals. */
export function hostPort(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The host of "host:port" ("[v6]:port" gives "v6"); '' when there is none. */
export function hostOf(endpoint: string): string {
  const at = endpoint.lastIndexOf(':');
  if (at <= 0) return '';
  return endpoint.slice(0, at).replace(/^\[(.*)\]$/, '$1');
}

/** The port of "host:port", as written ('' when there is none). */
export function portOf(endpoint: string): string {
  const at = endpoint.lastIndexOf(':');
  return at < 0 ? '' : endpoint.slice(at + 1);
}

/** The address of an endpoint: a bare address, a URL's host, or host:port's host; lowercase. */
export function addressOf(endpoint: string): string {
  const bare = endpoint.replace(/^\[(.*)\]$/, '$1');
  if (isIP(bare) !== 0) return bare.toLowerCase();
  try {
    return new URL(endpoint).hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  } catch {
    return hostOf(endpoint).toLowerCase();
  }
}
