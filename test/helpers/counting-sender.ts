// The one recording sender: slotguard/testing ships it to users as RecordingEmailSender.
export { RecordingEmailSender as CountingSender } from '../../shared/testing/recording-email-sender.js';
