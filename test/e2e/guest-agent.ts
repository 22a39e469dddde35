// Agents in the lab run in emulated (TCG) guests, which a loaded 2-core machine starves for
// seconds at a time. The agent's 5 s default lease is for real servers (docs/replication.md,
// "Timeouts"): a starved guest would miss its keep-alives, fence itself and fail its volumes over
// for no reason. Every lab agent runs with this lease unless a suite asks for another.
export const GUEST_AGENT_LEASE_ARGS: readonly string[] = ['--lease-ttl-seconds', '20'];
