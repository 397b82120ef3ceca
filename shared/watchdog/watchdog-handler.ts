import { watchdogHandlerFromEnvironment } from './watchdog-environment.js';

/**
 * The watchdog's Lambda entry: one function per stack and claims backend, invoked by one Scheduler
 * schedule per job (`rate(15 minutes)`) whose input is that job's WatchdogEvent
 * (shared/watchdog/watchdog-event.ts). Configured from the environment (watchdogHandlerFromEnvironment).
 */
export const handler = watchdogHandlerFromEnvironment(process.env);
