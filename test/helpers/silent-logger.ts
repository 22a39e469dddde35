import { createLogger, type Logger } from '../../lib/logger.js';

/** Tests log nothing unless STRATA_TEST_LOG_LEVEL asks for it (e.g. =debug when a test fails). */
export function silentLogger(name = 'strata-agent-test'): Logger {
  return createLogger(name, process.env['STRATA_TEST_LOG_LEVEL'] ?? 'silent');
}
