/**
 * CloudFormation's per-stack quotas that an app of many jobs can reach ("Understand CloudFormation
 * quotas" in the CloudFormation User Guide). None can be raised. The CDK uploads every template to
 * the bootstrap bucket, so the template size limit is the one for a template in S3.
 */
export const CLOUDFORMATION_STACK_LIMITS = {
  /** Resources in one stack (the CDK fails synth past it: "… is greater than allowed maximum of 500"). */
  resources: 500,
  /** Outputs in one stack, exports included. */
  outputs: 200,
  /** Parameters in one stack. */
  parameters: 200,
  /** Bytes of a template passed to CloudFormation as an S3 object. */
  templateBytes: 1_000_000,
} as const;
