import { type ResumableSource, resumableSource } from 'slotguard';

/** A customer who gets the weekly report. */
export interface Customer {
  readonly id: string;
  readonly email: string;
}

/**
 * The example's customer list: `count` synthetic customers, generated lazily so even a million are
 * never in memory at once. A real deployment streams its own (a DynamoDB query, an S3 object, a SQL
 * cursor) through the same AsyncIterable shape.
 */
export async function* syntheticCustomers(count: number, after = 0): AsyncGenerator<Customer> {
  for (let i = after + 1; i <= count; i++) yield customer(i);
}

/**
 * The same customers as a source a continuation resumes part-way: ordered by id, read after the
 * last id checkpointed. A real deployment does the same with its own cursor (`WHERE id > $1 ORDER
 * BY id`, a DynamoDB query's ExclusiveStartKey, an S3 Select offset).
 */
export function syntheticCustomerSource(count: number): ResumableSource<Customer> {
  return resumableSource({
    name: 'customers',
    read: (after) => syntheticCustomers(count, after === undefined ? 0 : Number(after.slice(1))),
    position: (c) => c.id,
  });
}

function customer(i: number): Customer {
  const id = `c${String(i).padStart(6, '0')}`;
  return { id, email: `customer-${id}@example.com` };
}
