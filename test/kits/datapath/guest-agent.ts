// Tests only: the agent (dist/agent/main.js, the production path) as a background job in a QEMU
// guest of the e2e lab, against an etcd and a control plane on the host (10.0.2.2 from the
// guest), and the NVMe/TCP initiator of the same guest (nvme-cli, sysfs).
import type { Guest, RunResult } from '../../e2e/lab/index.js';
import { repoRoot } from '../../e2e/lab/index.js';

export interface GuestAgentOptions {
  readonly etcdPort: number;
  readonly controlPlanePort: number;
  /** Further agent flags (--pool-dir, --data-devices, --volume-listen-address, ...). */
  readonly args: readonly string[];
}

export interface GuestAgent {
  /** Starts a new agent process; its PID goes to /tmp/agent.pid. Returns its log file. */
  start(): string;
  signal(signal: 'TERM' | 'KILL'): Promise<void>;
  /** Resolves once the agent process is gone. */
  exited(timeoutMs?: number): Promise<void>;
}

export function guestAgent(guest: Guest, options: GuestAgentOptions): GuestAgent {
  let run = 0;
  return {
    start() {
      run += 1;
      const log = `/tmp/agent.${run}.log`;
      const args = [
        '--etcd-endpoints', `${guest.hostAddressFromGuest}:${options.etcdPort}`,
        '--control-plane-endpoints', `${guest.hostAddressFromGuest}:${options.controlPlanePort}`,
        ...options.args,
      ];
      void guest
        .run(['sh', '-c', 'echo $$ > /tmp/agent.pid; exec node "$0" "$@" > "$LOG" 2>&1', `${repoRoot}/dist/agent/main.js`, ...args], { timeoutMs: 900_000, env: { LOG: log } })
        .catch(() => undefined);
      return log;
    },
    async signal(signal) {
      await guest.runOk(['sh', '-c', `kill -${signal} "$(cat /tmp/agent.pid)"`]);
    },
    async exited(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while ((await guest.run(['sh', '-c', 'kill -0 "$(cat /tmp/agent.pid)"'])).code === 0) {
        if (Date.now() > deadline) throw new Error('the agent in the guest did not exit');
        await new Promise((r) => setTimeout(r, 250));
      }
    },
  };
}

export interface GuestController {
  readonly name: string;
  readonly serial: string;
  readonly model: string;
  readonly cntlid: number;
  readonly state: string;
  readonly hostnqn: string;
  /** traddr of the controller's address (where the host connected to). */
  readonly traddr: string;
}

/** The guest initiator's controllers of a subsystem. */
export async function controllersOf(guest: Guest, nqn: string): Promise<GuestController[]> {
  const out = await guest.runOk([
    'sh',
    '-c',
    'for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "$0" ] || continue; ' +
      'echo "${c##*/}|$(cat $c/serial)|$(cat $c/model)|$(cat $c/cntlid)|$(cat $c/state)|$(cat $c/hostnqn)|$(cat $c/address)"; done',
    nqn,
  ]);
  return out.stdout
    .trim()
    .split('\n')
    .filter((l) => l)
    .map((l) => {
      const [name, serial, model, cntlid, state, hostnqn, address] = l.split('|');
      return {
        name: name!,
        serial: serial!.trim(),
        model: model!.trim(),
        cntlid: Number(cntlid),
        state: state!,
        hostnqn: hostnqn!,
        traddr: /traddr=([^,]*)/.exec(address ?? '')?.[1] ?? '',
      };
    });
}

/** `nvme connect` from the guest, giving up quickly on a lost controller (tests wait for that). */
export function nvmeConnect(guest: Guest, target: { nqn: string; traddr: string; port: number; hostnqn: string }): Promise<RunResult> {
  return guest.run(
    ['nvme', 'connect', '-t', 'tcp', '-a', target.traddr, '-s', String(target.port), '-n', target.nqn, '--hostnqn', target.hostnqn, '--ctrl-loss-tmo', '2', '--reconnect-delay', '1'],
    { timeoutMs: 30_000 },
  );
}
