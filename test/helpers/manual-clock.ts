// The one ManualClock: slotguard/testing ships it to users for their own job tests.
export { ManualClock, settle } from '../../shared/testing/manual-clock.js';
