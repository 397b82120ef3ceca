import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Log } from '../shared/telemetry/log.js';

/**
 * JSON lines to a file, for local runs: the demo's terminal stays readable and the log is there to
 * read after (`.slotguard/last-run.log.jsonl`). Fields carry effect-key hashes, never addresses.
 */
export function fileLog(path: string, bindings: Record<string, unknown> = {}): Log {
  mkdirSync(dirname(path), { recursive: true });
  const write = (level: string, message: string, fields: Record<string, unknown> = {}) =>
    appendFileSync(
      path,
      `${JSON.stringify({ timestamp: new Date().toISOString(), level, message, ...bindings, ...fields })}\n`,
    );
  return {
    info: (message, fields) => write('INFO', message, fields),
    warn: (message, fields) => write('WARN', message, fields),
    error: (message, fields) => write('ERROR', message, fields),
  };
}
