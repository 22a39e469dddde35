// Semantic-version ordering (semver.org §11) for MinVersionInCluster. Lenient about input:
// a leading "v" and missing minor/patch ("1.2" = "1.2.0") are accepted; build metadata is
// ignored. Strings that are not versions at all order after every real version.

interface Parsed {
  readonly core: readonly [bigint, bigint, bigint];
  readonly prerelease: readonly string[];
}

const VERSION = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/;

function parse(version: string): Parsed | null {
  const m = VERSION.exec(version.trim());
  if (!m) return null;
  return {
    core: [BigInt(m[1] ?? '0'), BigInt(m[2] ?? '0'), BigInt(m[3] ?? '0')],
    prerelease: m[4] ? m[4].split('.') : [],
  };
}

/** Negative when a < b, 0 when equal in precedence, positive when a > b. */
export function compareVersions(a: string, b: string): number {
  const pa = parse(a);
  const pb = parse(b);
  if (!pa || !pb) {
    if (pa) return -1;
    if (pb) return 1;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  for (let i = 0; i < 3; i++) {
    const x = pa.core[i] as bigint;
    const y = pb.core[i] as bigint;
    if (x !== y) return x < y ? -1 : 1;
  }
  // A pre-release has lower precedence than the release itself.
  if (pa.prerelease.length === 0 && pb.prerelease.length === 0) return 0;
  if (pa.prerelease.length === 0) return 1;
  if (pb.prerelease.length === 0) return -1;
  const n = Math.min(pa.prerelease.length, pb.prerelease.length);
  for (let i = 0; i < n; i++) {
    const c = compareIdentifier(pa.prerelease[i] as string, pb.prerelease[i] as string);
    if (c !== 0) return c;
  }
  return pa.prerelease.length - pb.prerelease.length;
}

/** Numeric identifiers compare numerically and before alphanumeric ones, which compare in ASCII order. */
function compareIdentifier(x: string, y: string): number {
  const nx = /^\d+$/.test(x);
  const ny = /^\d+$/.test(y);
  if (nx && ny) {
    const a = BigInt(x);
    const b = BigInt(y);
    return a === b ? 0 : a < b ? -1 : 1;
  }
  if (nx) return -1;
  if (ny) return 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

/** The lowest of the versions (empty strings skipped); '' when there is none. */
export function minVersion(versions: Iterable<string>): string {
  let min = '';
  for (const v of versions) {
    if (!v) continue;
    if (min === '' || compareVersions(v, min) < 0) min = v;
  }
  return min;
}
