// Work that only the active cluster manager does (controllers, retention): started when this
// instance becomes leader, stopped when it stops being leader. Transitions run one at a time,
// so a quick lose-win flap never leaves two copies of a task running.
import type { Logger } from '../../lib/logger.js';
import type { LeaderElection } from './leader-election.js';

export interface LeaderTask {
  readonly name: string;
  start(): Promise<{ stop(): Promise<void> }>;
}

export class LeaderTasks {
  private running: { name: string; stop(): Promise<void> }[] = [];
  private transition: Promise<void> = Promise.resolve();
  private unsubscribe: (() => void) | undefined;

  constructor(
    private readonly election: LeaderElection,
    private readonly tasks: readonly LeaderTask[],
    private readonly logger: Logger,
  ) {}

  watch(): void {
    this.unsubscribe = this.election.onChange((isLeader) => this.enqueue(isLeader));
    if (this.election.isLeader) this.enqueue(true);
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    this.enqueue(false);
    await this.transition;
  }

  private enqueue(isLeader: boolean): void {
    this.transition = this.transition.then(() => (isLeader ? this.startAll() : this.stopAll()));
  }

  private async startAll(): Promise<void> {
    if (this.running.length > 0 || !this.election.isLeader) return;
    for (const task of this.tasks) {
      try {
        const handle = await task.start();
        this.running.push({ name: task.name, stop: () => handle.stop() });
      } catch (err) {
        this.logger.error({ err, task: task.name }, 'leader task failed to start');
      }
    }
  }

  private async stopAll(): Promise<void> {
    const running = this.running.reverse();
    this.running = [];
    for (const task of running) {
      await task.stop().catch((err: unknown) => this.logger.error({ err, task: task.name }, 'leader task failed to stop'));
    }
  }
}
