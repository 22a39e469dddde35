#!/usr/bin/env node
// Rotates the cluster's agent secret (docs/agent-auth.md): a new current secret, the old one kept
// as previous, so a token issued just before the rotation still opens a session. Agents sign
// with whatever secret etcd holds when they issue a token, so live sessions go on with their next
// renewal. To retire a secret at once (it leaked), run it twice. Takes the control plane's
// settings, so on a control-plane server:
//   node /opt/strata/dist/control-plane/agents/rotate-agent-secret.js --config /etc/strata/control-plane.json
// Prints the ids (never the keys) of the current and previous secrets.
import { AgentSecretStore } from '../../lib/etcd/agent-secret-store.js';
import { createEtcdClient, etcdTlsOf } from '../../lib/etcd/client.js';
import { loadControlPlaneConfig } from '../config.js';

const config = loadControlPlaneConfig({
  program: 'strata-rotate-agent-secret',
  summary: 'Rotate the secret agents sign their control-plane tokens with (reads etcdEndpoints from the control plane settings)',
});
const etcd = createEtcdClient(config.etcdEndpoints, undefined, etcdTlsOf(config));
try {
  const rotated = await new AgentSecretStore(etcd).rotate();
  process.stdout.write(`${JSON.stringify({ current: rotated.current.id, previous: rotated.previous?.id ?? null })}\n`);
} catch (err) {
  process.stderr.write(`strata-rotate-agent-secret: ${(err as Error).message}\n`);
  process.exitCode = 1;
} finally {
  etcd.close();
}
