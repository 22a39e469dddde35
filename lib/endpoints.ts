// "host:port" endpoints as the API shows them (IPv6 hosts in brackets), in one place.

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
