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
export async function* syntheticCustomers(count: number): AsyncGenerator<Customer> {
  for (let i = 1; i <= count; i++) {
    const id = `c${String(i).padStart(6, '0')}`;
    yield { id, email: `customer-${id}@example.com` };
  }
}
