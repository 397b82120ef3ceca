import { sesEventRecorderFromEnvironment } from './ses-events-environment.js';

/**
 * The SES event recorder's Lambda entry: one function per stack and claims backend, invoked by one
 * EventBridge rule per job (its configuration set's Send, Reject and Rendering Failure events,
 * matched by the message's `slotguard-job` tag). Configured from the environment
 * (sesEventRecorderFromEnvironment).
 */
export const handler = sesEventRecorderFromEnvironment(process.env);
