// How a user names a volume or a snapshot on the command line: its UUID, or project/name (names
// are unique per project; neither names nor project names may contain "/"). A bare name means
// the `default` project, as the API's own by-name lookups do (docs/volumes.md).
import { isUuid } from '../lib/contract/uuid.js';
import { UsageError } from './errors.js';

export const DEFAULT_PROJECT = 'default';

export type ResourceRef =
  | { readonly kind: 'uuid'; readonly UUID: string }
  | { readonly kind: 'name'; readonly projectName: string; readonly name: string };

/** `what` names the resource in messages ("volume", "snapshot"). */
export function parseResourceRef(text: string, what: string): ResourceRef {
  const value = text.trim();
  if (isUuid(value)) return { kind: 'uuid', UUID: value.toLowerCase() };
  const parts = value.split('/');
  if (parts.length === 1 && parts[0] !== '') return { kind: 'name', projectName: DEFAULT_PROJECT, name: parts[0]! };
  if (parts.length === 2 && parts[0] !== '' && parts[1] !== '') return { kind: 'name', projectName: parts[0]!, name: parts[1]! };
  throw new UsageError(`invalid ${what} "${text}": give its UUID or project/name`);
}

export function describeRef(ref: ResourceRef): string {
  return ref.kind === 'uuid' ? ref.UUID : `${ref.projectName}/${ref.name}`;
}
