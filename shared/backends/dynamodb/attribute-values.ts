import type { AttributeValue, ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';

export const str = (value: string): AttributeValue => ({ S: value });
export const num = (value: number): AttributeValue => ({ N: String(value) });

/** The item a failed condition returned (ReturnValuesOnConditionCheckFailure ALL_OLD), if the server sent one. */
export function conflictItem(
  error: ConditionalCheckFailedException,
): Record<string, AttributeValue> | undefined {
  return error.Item && Object.keys(error.Item).length > 0 ? error.Item : undefined;
}
