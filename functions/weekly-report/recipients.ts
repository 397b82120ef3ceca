import { type ResumableSource, resumableSource } from '../../shared/effects/resumable-source.js';

/** A customer who gets the weekly report. */
export interface Customer {
  readonly id: string;
  readonly email: string;
}

/**
 * The example's customer list: `count` synthetic customers, generated lazily so even a million are
 * never in memory at once. A real deployment streams its own (a DynamoDB query, an S3 object, a SQL
 * cursor) through the same AsyncIterable shape. With `after` (a customer id), only the customers
 * after that one.
 */
export async function* syntheticCustomers(count: number, after?: string): AsyncGenerator<Customer> {
  if (after !== undefined && !/^c\d{6,}$/.test(after)) {
    // A position this list never gave out: reading on from a guess could skip customers.
    throw new RangeError(`after is ${JSON.stringify(after)}; pass a customer id such as "c000042"`);
  }
  // Ids are zero-padded, so their order as strings is their order as numbers.
  const first = after === undefined ? 1 : Number(after.slice(1)) + 1;
  for (let i = first; i <= count; i++) {
    const id = `c${String(i).padStart(6, '0')}`;
    yield { id, email: `customer-${id}@example.com` };
  }
}

/**
 * The same customers as a resumable source, ordered by id: a continuation of the window reads on
 * after the last customer its checkpoint covers, instead of walking the list again and paying a
 * conditional write for every customer already sent.
 */
export function syntheticCustomerSource(count: number): ResumableSource<Customer> {
  return resumableSource({
    name: 'customers',
    read: (after) => syntheticCustomers(count, after),
    position: (customer) => customer.id,
  });
}
