import type { IConstruct } from 'constructs';
import { SlotguardError } from '../shared/errors.js';

/**
 * A construct prop that cannot deploy or cannot work, found at synth time. aws-cdk-lib's own
 * `ValidationError` is marked `@internal` (not part of its public API), so slotguard's constructs
 * throw this instead; like CDK's, it names the construct path, and its message names the prop,
 * the value received and the fix.
 */
export class InfraValidationError extends SlotguardError {
  /** The path of the construct whose prop failed, e.g. `Slotguard/weekly-report`. */
  readonly constructPath: string;
  /** The prop that failed, e.g. `job.leaseSeconds`. */
  readonly prop: string;

  constructor(scope: IConstruct, prop: string, problem: string, options?: { cause?: unknown }) {
    const kind = scope.constructor.name;
    super(`${kind} '${scope.node.path}': ${problem}`, options);
    this.constructPath = scope.node.path;
    this.prop = prop;
  }
}
