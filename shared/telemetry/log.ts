import { Logger } from '@aws-lambda-powertools/logger';

/**
 * Structured JSON logging. The runtime logs through this narrow port; production passes a
 * Powertools Logger (JSON lines with Lambda context), tests pass a recorder. Fields never carry a
 * raw effect key: only its HMAC hash.
 */
export interface Log {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** A Powertools Logger for one job, JSON to stdout. Level from POWERTOOLS_LOG_LEVEL (default INFO). */
export function jsonLog(jobId: string): Log {
  const logger = new Logger({ serviceName: 'slotguard', persistentKeys: { jobId } });
  return {
    info: (message, fields) => logger.info(message, fields ?? {}),
    warn: (message, fields) => logger.warn(message, fields ?? {}),
    error: (message, fields) => logger.error(message, fields ?? {}),
  };
}

/** Drops everything: for benchmarks and demos that print their own progress. */
export const silentLog: Log = { info() {}, warn() {}, error() {} };
