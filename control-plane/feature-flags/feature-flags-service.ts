// Feature flags (spec 2.10, 4.6). Five names; a flag never set has its default:
//   event-log               enabled   events are recorded only while it is enabled
//   evict-data, fail-in-place, in-band-authentication, proactive-rebalance   disabled
// Enable and disable are idempotent (setting a flag to its current value writes nothing and
// records no event). A change records a Cluster event through the EventRecorder.
//
// A flag with an effect of its own is set by the service that owns the effect (delegate()):
// `in-band-authentication` is the in-band authentication service's enable/disable
// (control-plane/in-band-auth/), with its checks; without that service it cannot be enabled
// (400), since nothing would authenticate hosts. Disabling always works.
import { StrataError, errors } from '../../lib/errors.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { EventRecorder } from '../events/event-recorder.js';
import { FEATURE_FLAG_NAMES, type FeatureFlagName, type FeatureFlagReader } from '../volumes/volume-dependencies.js';
import type { FeatureFlagRecord, FeatureFlagsStore } from './feature-flags-store.js';

export const FEATURE_FLAG_DEFAULTS: Readonly<Record<FeatureFlagName, boolean>> = {
  'event-log': true,
  'evict-data': false,
  'fail-in-place': false,
  'in-band-authentication': false,
  'proactive-rebalance': false,
};

/** Flags that cannot be enabled because what they turn on does not exist yet (400), and why. */
export const UNAVAILABLE_FLAGS: Readonly<Partial<Record<FeatureFlagName, string>>> = {
  'in-band-authentication':
    'in-band (DH-HMAC-CHAP) host authentication is not implemented without the in-band authentication service (control-plane/in-band-auth/), which this process does not run: the NVMe targets would keep admitting every host in a volume\'s ACL without authenticating it',
};

/** Sets a flag and its effect; answers whether it changed. */
export type FlagDelegate = (enabled: boolean, actor: string) => Promise<boolean>;

export interface FeatureFlagWire {
  name: FeatureFlagName;
  enabled: boolean;
}

const ATTEMPTS = 10;

export class FeatureFlagsService implements FeatureFlagReader {
  constructor(
    private readonly store: FeatureFlagsStore,
    private readonly events: EventRecorder,
  ) {}

  private readonly delegates = new Map<FeatureFlagName, FlagDelegate>();

  /** Hands a flag to the service that owns its effect. */
  delegate(name: FeatureFlagName, set: FlagDelegate): void {
    this.delegates.set(name, set);
  }

  async isEnabled(name: FeatureFlagName): Promise<boolean> {
    return (await this.store.get(name))?.record.enabled ?? FEATURE_FLAG_DEFAULTS[name];
  }

  /** Every flag, keyed by name, in the spec's order. */
  async list(): Promise<Record<FeatureFlagName, FeatureFlagWire>> {
    const stored = new Map((await this.store.list()).map((f) => [f.record.name, f.record.enabled]));
    const flags = {} as Record<FeatureFlagName, FeatureFlagWire>;
    for (const name of FEATURE_FLAG_NAMES) flags[name] = { name, enabled: stored.get(name) ?? FEATURE_FLAG_DEFAULTS[name] };
    return flags;
  }

  async get(name: FeatureFlagName): Promise<FeatureFlagWire> {
    return { name, enabled: await this.isEnabled(name) };
  }

  /** Sets the flag; `actor` is the token subject, for the record and the event. */
  async set(name: FeatureFlagName, enabled: boolean, actor: string): Promise<void> {
    const delegate = this.delegates.get(name);
    if (delegate) {
      if (await delegate(enabled, actor)) await this.recordChange(name, enabled, actor);
      return;
    }
    const unavailable = UNAVAILABLE_FLAGS[name];
    if (enabled && unavailable) throw errors.invalid(`feature flag ${name} cannot be enabled: ${unavailable}`);
    await retryLostRaces<void>(ATTEMPTS, async () => {
      const current = await this.store.get(name);
      const was = current?.record.enabled ?? FEATURE_FLAG_DEFAULTS[name];
      if (was === enabled) return;
      const record: FeatureFlagRecord = { name, enabled, updatedAt: new Date().toISOString(), updatedBy: actor };
      if (!(await this.store.put(record, current?.revision ?? '0'))) return LOST_RACE;
      await this.recordChange(name, enabled, actor);
    }, () => new StrataError('OPERATION_IN_PROGRESS', `feature flag ${name} is being changed by other requests; retry`));
  }

  /** The Cluster event of a flag change. */
  async recordChange(name: FeatureFlagName, enabled: boolean, actor: string): Promise<void> {
    const cluster = await this.store.cluster().catch(() => null);
    await this.events.record({
      type: 'Cluster',
      severity: 'Info',
      eventName: enabled ? 'FeatureFlagEnabled' : 'FeatureFlagDisabled',
      reportingService: 'API',
      description: `feature flag ${name} ${enabled ? 'enabled' : 'disabled'}${actor ? ` by ${actor}` : ''}`,
      component: { kind: 'cluster', ID: cluster?.UUID ?? '', Name: cluster?.clusterName ?? '' },
      status: enabled ? 'Enabled' : 'Disabled',
    });
  }
}
