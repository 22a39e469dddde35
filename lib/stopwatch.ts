// Milliseconds per step of a piece of work, for the log line that says where its time went (a
// failover's steps, a reconcile pass's phases).
import { performance } from 'node:perf_hooks';

/** A lap function: each call records the time since the previous one (or since the start) under `step` and returns every lap so far. */
export type Lap = (step: string) => Record<string, number>;

/** Starts timing; `observe` sees each lap as it is taken (a metric). */
export function stopwatch(observe?: (step: string, ms: number) => void): Lap {
  const laps: Record<string, number> = {};
  let last = performance.now();
  return (step) => {
    const now = performance.now();
    const ms = Math.round(now - last);
    laps[step] = ms;
    observe?.(step, ms);
    last = now;
    return laps;
  };
}
