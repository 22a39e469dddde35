// Access lists (a volume's `acl` of host NQNs and `IPAcl` of addresses) and their two
// pseudo-values (wire-conventions §8): ALLOW_ANY admits everyone, ALLOW_NONE nobody, and
// either stands alone, never mixed with entries. The API validates with these rules, the agent
// serves and answers discovery with them, the CLI edits ACLs with them.

export const ALLOW_ANY = 'ALLOW_ANY';
export const ALLOW_NONE = 'ALLOW_NONE';
export type AclPseudoValue = typeof ALLOW_ANY | typeof ALLOW_NONE;

/** The defaults of an absent or empty list: no host may connect by NQN; any address may. */
export const DEFAULT_ACL: readonly string[] = [ALLOW_NONE];
export const DEFAULT_IP_ACL: readonly string[] = [ALLOW_ANY];

export function isAclPseudoValue(value: unknown): value is AclPseudoValue {
  return value === ALLOW_ANY || value === ALLOW_NONE;
}

/** The rule's one violation: a pseudo-value together with anything else. */
export function mixesPseudoValues(entries: readonly unknown[]): boolean {
  return entries.length > 1 && entries.some(isAclPseudoValue);
}

/**
 * What a list means: 'any', 'none', or its entries (as given). An empty list means `whenEmpty`
 * (the list's default). undefined when a pseudo-value is mixed with other entries.
 */
export function accessOf(entries: readonly string[], whenEmpty: AclPseudoValue): 'any' | 'none' | readonly string[] | undefined {
  if (mixesPseudoValues(entries)) return undefined;
  const only = entries.length === 0 ? whenEmpty : entries.length === 1 && isAclPseudoValue(entries[0]) ? entries[0] : undefined;
  if (only === ALLOW_ANY) return 'any';
  if (only === ALLOW_NONE) return 'none';
  return entries;
}

/** What a list that mixes a pseudo-value with other entries is told (`list`: "an ACL", "an IP ACL"). */
export function mixedPseudoValuesProblem(list: string): string {
  return `${ALLOW_ANY} and ${ALLOW_NONE} must stand alone in ${list}`;
}

/** Whether a host ACL admits `hostNQN`. */
export function aclAdmits(acl: readonly string[], hostNQN: string): boolean {
  if (acl.includes(ALLOW_NONE)) return false;
  return acl.includes(ALLOW_ANY) || acl.includes(hostNQN);
}
