// pino JSON logs on stdout: journald (systemd units) and the local cluster's log files take them as is.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(name: string, level: string): Logger {
  return pino({
    name,
    level,
    base: { service: name, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    serializers: { err: pino.stdSerializers.err },
  });
}
