import { type ResumableSource, resumableSource } from 'slotguard';

/** A customer who gets the weekly report. */
export interface Customer {
  readonly id: string;
  readonly email: string;
}

/**
 * The example's customer list: `count` synthetic customers, generated lazily so even a million are
 * never in memory at once. A real deployment streams its own (a DynamoDB query, an S3 object, a SQL
 * cursor) through the same AsyncIterable shape. With `after`, only the customers after the
 * `after`-th.
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
    read: (after) => syntheticCustomers(count, after === undefined ? 0 : customerNumber(after)),
    position: (c) => c.id,
  });
}

/** The number in a customer id; a position this list never gave out is refused, not guessed at. */
function customerNumber(id: string): number {
  if (!/^c\d{6,}$/.test(id)) {
    throw new RangeError(`position is ${JSON.stringify(id)}; pass a customer id such as "c000042"`);
  }
  return Number(id.slice(1));
}

function customer(i: number): Customer {
  const id = `c${String(i).padStart(6, '0')}`;
  return { id, email: `customer-${id}@example.com` };
}
