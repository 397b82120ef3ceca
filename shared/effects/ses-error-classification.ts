import {
  AccountSuspendedException,
  AlreadyExistsException,
  BadRequestException,
  ConcurrentModificationException,
  ConflictException,
  InternalServiceErrorException,
  InvalidNextTokenException,
  LimitExceededException,
  MailFromDomainNotVerifiedException,
  MessageRejected,
  NotFoundException,
  SESv2ServiceException,
  SendingPausedException,
  TooManyRequestsException,
} from '@aws-sdk/client-sesv2';
import { EffectNotPerformedError, NotPerformedReason } from '../errors.js';
import { safeErrorText, withoutAddresses } from '../telemetry/safe-error-text.js';

/**
 * The rule: an error is "not performed" only when SES answered and its answer is a refusal of the
 * request, which SES gives before it accepts the message. Everything else is in doubt: a 5xx, a
 * timeout or a dropped connection can come after SES accepted the message, and an HTTP status alone
 * proves nothing. A wrong "not performed" is a duplicate email on the next run; a wrong "in doubt"
 * is one email reported instead of sent. So what is not known to be a refusal is in doubt.
 */
const InDoubt = 'in-doubt';

/** The reasons SES's answers map to; cancelled and unspecified come from elsewhere. */
type SesRefusal = Exclude<NotPerformedReason, 'cancelled' | 'unspecified'>;
type Verdict = SesRefusal | typeof InDoubt;

type SesErrorClass = abstract new (...args: never[]) => SESv2ServiceException;

/**
 * Every exception class @aws-sdk/client-sesv2 exports (3.1169), by `instanceof`.
 *
 * SendEmail declares the first eight; each is SES's answer to the request, sent instead of accepting
 * the message:
 * - TooManyRequestsException (429): over the send rate; throttled, clears in seconds.
 * - LimitExceededException: an account limit is used up; quota, which frees up hours later, so
 *   systemic.
 * - SendingPausedException, AccountSuspendedException: the account cannot send; configuration.
 * - MailFromDomainNotVerifiedException: the From domain is not verified; configuration.
 * - NotFoundException: the request names something that does not exist (the configuration set);
 *   configuration.
 * - MessageRejected: this message was refused (content, or an unverified address in the sandbox);
 *   rejected, this effect only. An unverified From address also arrives as MessageRejected and
 *   fails every send; the runtime's consecutive-failures rule catches that case.
 * - BadRequestException: the input is invalid, most often one recipient's malformed address;
 *   invalid-request, this effect only.
 *
 * SendEmail declares none of the other five. InternalServiceErrorException is a 500: SES may have
 * failed after accepting the message. The resource-management errors (AlreadyExists, Conflict,
 * ConcurrentModification, InvalidNextToken) would mean SES answered SendEmail in a way its contract
 * does not describe, which is no proof that nothing was sent.
 */
const SES_ERROR_CLASSES: ReadonlyArray<readonly [SesErrorClass, Verdict]> = [
  [TooManyRequestsException, NotPerformedReason.Throttled],
  [LimitExceededException, NotPerformedReason.Quota],
  [SendingPausedException, NotPerformedReason.Configuration],
  [AccountSuspendedException, NotPerformedReason.Configuration],
  [MailFromDomainNotVerifiedException, NotPerformedReason.Configuration],
  [NotFoundException, NotPerformedReason.Configuration],
  [MessageRejected, NotPerformedReason.Rejected],
  [BadRequestException, NotPerformedReason.InvalidRequest],
  [InternalServiceErrorException, InDoubt],
  [AlreadyExistsException, InDoubt],
  [ConflictException, InDoubt],
  [ConcurrentModificationException, InDoubt],
  [InvalidNextTokenException, InDoubt],
];

/**
 * The errors every AWS API can return (the Common Errors of the API reference, and the
 * authentication errors of the AWS front end). The client has no class for them: the SDK
 * deserializes each into a bare SESv2ServiceException whose `name` is the error code from the wire.
 * That name is the only handle AWS gives, so this table is the one place slotguard dispatches on an
 * error name, and only for an SESv2ServiceException that the SDK marked a client fault (a 4xx: the
 * service answered and refused the request).
 *
 * - Credentials and signatures refused: unauthorized, every send fails until an operator fixes the
 *   role or the credentials. RequestExpired is a signature stamped more than 15 minutes off (clock
 *   skew), refused like a bad signature.
 * - OptInRequired: the account is not subscribed to SES in the region; configuration.
 * - ThrottlingException: SES's documented answer to both sending limits; throttled (or quota, see
 *   DAILY_QUOTA).
 * - Validation and parameter errors: invalid-request.
 * - InternalFailure, ServiceUnavailable, RequestTimeout and the like: in doubt, listed so the table
 *   says so; any name not listed is in doubt as well.
 */
const GENERIC_AWS_ERRORS: ReadonlyMap<string, Verdict> = new Map<string, Verdict>([
  ['AccessDeniedException', NotPerformedReason.Unauthorized],
  ['AccessDenied', NotPerformedReason.Unauthorized],
  ['NotAuthorized', NotPerformedReason.Unauthorized],
  ['UnrecognizedClientException', NotPerformedReason.Unauthorized],
  ['InvalidClientTokenId', NotPerformedReason.Unauthorized],
  ['ExpiredTokenException', NotPerformedReason.Unauthorized],
  ['ExpiredToken', NotPerformedReason.Unauthorized],
  ['IncompleteSignature', NotPerformedReason.Unauthorized],
  ['InvalidSignatureException', NotPerformedReason.Unauthorized],
  ['SignatureDoesNotMatch', NotPerformedReason.Unauthorized],
  ['MissingAuthenticationToken', NotPerformedReason.Unauthorized],
  ['RequestExpired', NotPerformedReason.Unauthorized],
  ['OptInRequired', NotPerformedReason.Configuration],
  ['ThrottlingException', NotPerformedReason.Throttled],
  ['Throttling', NotPerformedReason.Throttled],
  ['ValidationException', NotPerformedReason.InvalidRequest],
  ['ValidationError', NotPerformedReason.InvalidRequest],
  ['InvalidParameterValue', NotPerformedReason.InvalidRequest],
  ['InvalidParameterCombination', NotPerformedReason.InvalidRequest],
  ['MissingParameter', NotPerformedReason.InvalidRequest],
  ['SerializationException', NotPerformedReason.InvalidRequest],
  ['InternalFailure', InDoubt],
  ['InternalServerError', InDoubt],
  ['ServiceUnavailable', InDoubt],
  ['ServiceUnavailableException', InDoubt],
  ['RequestTimeout', InDoubt],
  ['RequestTimeoutException', InDoubt],
]);

/**
 * SES documents one error for both of its sending limits, told apart only by the message ("Maximum
 * sending rate exceeded", "Daily message quota exceeded"). The text only chooses between two
 * not-performed reasons, never whether the email may have gone.
 */
const DAILY_QUOTA = /daily message quota exceeded/i;

/** What the operator or a later run can do, per reason; the error message ends with it. */
const WHAT_NEXT: Readonly<Record<SesRefusal, string>> = {
  [NotPerformedReason.Throttled]:
    "a later run may send it; keep maxSendRatePerSecond at or below the account's SES maximum send rate",
  [NotPerformedReason.Quota]:
    "every send fails until the account's 24-hour sending quota frees up; a later run may send it, " +
    'or request a higher quota',
  [NotPerformedReason.Unauthorized]:
    "every send fails until the function's credentials may call ses:SendEmail on the From identity; " +
    'check its role and credentials',
  [NotPerformedReason.Configuration]:
    'every send fails until the SES account or identity is fixed: check the sending status, the ' +
    'identity and MAIL FROM verification and the configuration set',
  [NotPerformedReason.Rejected]: 'SES refused this message or recipient; a later run may try it again',
  [NotPerformedReason.InvalidRequest]:
    'SES found the request invalid; check the From address, the recipient address and the content',
};

/**
 * Reads an error from SES v2 SendEmail: an EffectNotPerformedError (with its reason, and whether it
 * is systemic) when SES refused the request before accepting the message, or undefined when the
 * email may have been sent (in doubt: rethrow the error, masked with `withoutAddresses`).
 *
 * The returned error's message and its cause (the SES error, redacted in place) hold no address.
 *
 * @example
 * try {
 *   await client.send(command);
 * } catch (error) {
 *   throw classifySesError(error) ?? withoutAddresses(error);
 * }
 */
export function classifySesError(error: unknown): EffectNotPerformedError | undefined {
  if (!(error instanceof SESv2ServiceException)) return undefined;
  const verdict = verdictOf(error);
  if (verdict === InDoubt) return undefined;
  const reason =
    verdict === NotPerformedReason.Throttled && DAILY_QUOTA.test(error.message)
      ? NotPerformedReason.Quota
      : verdict;
  const cause = withoutAddresses(error);
  return new EffectNotPerformedError(
    `SES refused the message before sending it (${safeErrorText(cause)}); nothing was sent; ${WHAT_NEXT[reason]}`,
    { cause, reason },
  );
}

function verdictOf(error: SESv2ServiceException): Verdict {
  for (const [errorClass, verdict] of SES_ERROR_CLASSES) {
    if (error instanceof errorClass) return verdict;
  }
  if (error.$fault !== 'client') return InDoubt;
  return GENERIC_AWS_ERRORS.get(error.name) ?? InDoubt;
}
