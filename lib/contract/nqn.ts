// NVMe Qualified Names: the subsystem NQN of a volume (control plane, agent, CLI and launcher
// must agree on it byte for byte: hosts connect with it) and what a host NQN may look like.
import { z } from 'zod';
import { UUID_PATTERN } from './uuid.js';

/** NQNs are at most 223 bytes (NVMe base 2.0, 4.5). */
export const NQN_MAX_BYTES = 223;
/** The UUID-based host NQN form (nvme-cli's default /etc/nvme/hostnqn). */
export const NQN_UUID_PREFIX = 'nqn.2014-08.org.nvmexpress:uuid:';
// nqn.<yyyy>-<mm>.<reverse domain>[:<anything printable>] (NVMe base spec, "NVMe Qualified Names").
const NQN_PATTERN = /^nqn\.\d{4}-(0[1-9]|1[0-2])\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(:[^\s\x00-\x1f\x7f]+)?$/;

/** The prefix of every volume subsystem NQN of a cluster: `<cluster subsystemNQN>:vol:`. */
export function volumeNqnPrefix(clusterSubsystemNQN: string): string {
  return `${clusterSubsystemNQN}:vol:`;
}

/** A volume's subsystem NQN: `<cluster subsystemNQN>:vol:<volume UUID>`. */
export function volumeSubsystemNQN(clusterSubsystemNQN: string, volumeUUID: string): string {
  return `${volumeNqnPrefix(clusterSubsystemNQN)}${volumeUUID}`;
}

/** Why `value` is not a host NQN, or null when it is one. */
export function hostNqnProblem(value: string): string | null {
  if (Buffer.byteLength(value, 'utf8') > NQN_MAX_BYTES) return `must be at most ${NQN_MAX_BYTES} bytes`;
  if (value.startsWith(NQN_UUID_PREFIX)) {
    return UUID_PATTERN.test(value.slice(NQN_UUID_PREFIX.length)) ? null : `must be ${NQN_UUID_PREFIX}<UUID>`;
  }
  return NQN_PATTERN.test(value) ? null : 'must be a host NQN (nqn.yyyy-mm.<reverse domain>[:<name>]), ALLOW_ANY or ALLOW_NONE';
}

/**
 * A host NQN as API inputs take it (trusted hosts): a host NQN's form, 1 to 223 bytes. The OpenAPI
 * document carries its pattern and length; hostNqnProblem says what is wrong with one.
 */
export const hostNqnSchema = z
  .string({ error: 'must be a string' })
  .min(1, 'must be a host NQN')
  .max(NQN_MAX_BYTES, `must be at most ${NQN_MAX_BYTES} bytes`)
  .regex(NQN_PATTERN, 'must be a host NQN (nqn.yyyy-mm.<reverse domain>[:<name>])')
  .refine((v) => hostNqnProblem(v) === null, `must be ${NQN_UUID_PREFIX}<UUID> or another host NQN of at most ${NQN_MAX_BYTES} bytes`)
  .meta({ description: `a host NQN (nqn.yyyy-mm.<reverse domain>[:<name>], ${NQN_UUID_PREFIX}<UUID>), at most ${NQN_MAX_BYTES} bytes` });
