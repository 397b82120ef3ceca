import { loadavg } from 'node:os';
import { type DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { WEEKLY_REPORT_JOB_ID } from '../functions/weekly-report/job.js';
import { slotPartitionKey, slotSortKey, TableLayout } from '../shared/backends/dynamodb/table-layout.js';
import { itemBytes, type RequestMeter } from './request-meter.js';
import { type Measured, measureFire, type Variant } from './variants.js';

/** The doc section this bench writes (docs/benchmarks.md), between its markers. */
export const WRITE_UNITS_SECTION = 'write-units';

/**
 * DynamoDB's on-demand throughput price in us-east-1, Standard table class, in US dollars per
 * million request units, since AWS halved it in November 2024
 * (https://aws.amazon.com/dynamodb/pricing/on-demand/).
 */
export const ON_DEMAND_PRICE = {
  region: 'us-east-1',
  writePerMillion: 0.625,
  readPerMillion: 0.125,
  since: 'November 2024',
} as const;

/** What a slotguard fire's slot item came to, and what writing it cost. */
export interface SlotItemReport {
  /** Its size at the end of the fire, in bytes as DynamoDB bills them (the run's summary included). */
  readonly bytes: number;
  /** The fire's UpdateItems of it: the claim, each checkpoint (with the done marks), the completion. */
  readonly updates: number;
  /** The write units those UpdateItems consumed: one each while the item stays under 1 KB. */
  readonly units: number;
}

/** One variant's fire at one send latency. */
export interface SendLatencyRow {
  readonly variant: string;
  readonly latencyMs: number;
  readonly recipients: number;
  readonly m: Measured;
  /** A slotguard variant's slot item. */
  readonly slotItem?: SlotItemReport;
}

/** The section's runs, and the machine's load around them (it is shared: the rates depend on it). */
export interface SendLatencyResult {
  readonly rows: readonly SendLatencyRow[];
  readonly concurrency: number;
  /** One-minute load average before and after the runs. */
  readonly load: readonly [number, number];
}

export interface SendLatencyOptions {
  readonly client: DynamoDBClient;
  readonly meter: RequestMeter;
  /** In the order they run at each latency; the first is the baseline (the unguarded loop). */
  readonly variants: readonly Variant[];
  readonly recipients: number;
  readonly concurrency: number;
  readonly latenciesMs: readonly number[];
  /** A window no variant has used. */
  readonly window: () => string;
  readonly log: (line: string) => void;
}

const n = (value: number, digits = 0) =>
  value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/**
 * Every variant fires one window of `recipients` at `concurrency`, once per send latency: what the
 * guard costs in DynamoDB write units, and how much of the unguarded loop's throughput it keeps
 * when a send takes as long as an SES call does.
 */
export async function sendLatencyRuns(o: SendLatencyOptions): Promise<SendLatencyResult> {
  const rows: SendLatencyRow[] = [];
  const loadBefore = loadavg()[0] ?? 0;
  for (const latencyMs of o.latenciesMs) {
    for (const variant of o.variants) {
      const window = o.window();
      const m = await measureFire(o.meter, latencyMs, (sender) =>
        variant.fire(window, o.recipients, o.concurrency, sender),
      );
      // Taken before the slot item is read: that read is the bench's, not the fire's.
      const updates = o.meter.byOperation.get('UpdateItem') ?? 0;
      const units = o.meter.writeUnitsByOperation.get('UpdateItem') ?? 0;
      const bytes =
        variant.claimsTable === undefined
          ? undefined
          : await slotItemBytes(o.client, variant.claimsTable, window);
      const slotItem = bytes === undefined ? undefined : { bytes, updates, units };
      rows.push({
        variant: variant.name,
        latencyMs,
        recipients: o.recipients,
        m,
        ...(slotItem ? { slotItem } : {}),
      });
      o.log(
        `send ${latencyMs} ms c=${o.concurrency} ${variant.name}: ${n(o.recipients / m.seconds)} recipients/s, ` +
          `${n(m.writeUnits / o.recipients, 3)} write units/recipient, ` +
          `CPU ${n((m.cpuSeconds * 1000) / o.recipients, 2)} ms/recipient, ` +
          `machine ${n(m.machineCpuSeconds / m.seconds, 2)} cores busy` +
          (slotItem ? `; slot item ${bytes} bytes, ${updates} UpdateItems for ${units} units` : ''),
      );
    }
  }
  return { rows, concurrency: o.concurrency, load: [loadBefore, loadavg()[0] ?? 0] };
}

/** The window's slot item, as the fire's last write left it. */
async function slotItemBytes(
  client: DynamoDBClient,
  tableName: string,
  window: string,
): Promise<number | undefined> {
  const { Item } = await client.send(
    new GetItemCommand({
      TableName: tableName,
      Key: {
        [TableLayout.partitionKey]: { S: slotPartitionKey(WEEKLY_REPORT_JOB_ID, window) },
        [TableLayout.sortKey]: { S: slotSortKey(undefined) },
      },
      ConsistentRead: true,
    }),
  );
  return Item ? itemBytes(Item) : undefined;
}

/** The section's Markdown: the table, what each variant costs on DynamoDB, and the issue's goals. */
export function sendLatencySection({ rows, concurrency, load }: SendLatencyResult): string {
  const baseline = rows[0]?.variant;
  const rate = (r: SendLatencyRow) => r.recipients / r.m.seconds;
  const find = (variant: string | undefined, latencyMs: number) =>
    rows.find((r) => r.variant === variant && r.latencyMs === latencyMs);
  const ratio = (r: SendLatencyRow) => {
    const base = find(baseline, r.latencyMs);
    return base ? rate(r) / rate(base) : Number.NaN;
  };
  const variants = [...new Set(rows.map((r) => r.variant))];
  const latencies = [...new Set(rows.map((r) => r.latencyMs))];
  const recipients = rows[0]?.recipients ?? 0;

  // Per recipient over every fire of a variant: the units hardly depend on the send's latency.
  const perRecipient = (variant: string | undefined) => {
    const mine = rows.filter((r) => r.variant === variant);
    const total = mine.reduce((sum, r) => sum + r.recipients, 0);
    const per = (pick: (m: Measured) => number) => mine.reduce((sum, r) => sum + pick(r.m), 0) / total;
    const writeUnits = per((m) => m.writeUnits);
    const readUnits = per((m) => m.readUnits);
    const dollars = writeUnits * ON_DEMAND_PRICE.writePerMillion + readUnits * ON_DEMAND_PRICE.readPerMillion;
    return { writeUnits, readUnits, dollars };
  };

  const table = [
    '| variant | send | recipients/s | × unguarded | requests / recipient | write units / recipient | emails sent | CPU / recipient | cores busy (machine) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.variant} | ${r.latencyMs} ms | ${n(rate(r))} | ${n(ratio(r), 2)}× | ${n(r.m.requests / r.recipients, 3)} | ` +
        `${n(r.m.writeUnits / r.recipients, 3)} | ${n(r.m.sends)} | ${n((r.m.cpuSeconds * 1000) / r.recipients, 2)} ms | ` +
        `${n(r.m.machineCpuSeconds / r.m.seconds, 2)} |`,
    ),
  ].join('\n');

  const slotItems = rows.flatMap((r) => (r.slotItem ? [r.slotItem] : []));
  const largest = Math.max(0, ...slotItems.map((s) => s.bytes));
  const updates = slotItems.reduce((sum, s) => sum + s.updates, 0);
  const updateUnits = slotItems.reduce((sum, s) => sum + s.units, 0);

  const costs = variants
    .map((variant) => {
      const c = perRecipient(variant);
      return (
        `- **${variant}**: ${n(c.writeUnits, 3)} write units and ${n(c.readUnits, 3)} read units per recipient, ` +
        `$${n(c.dollars, 2)} per million recipients.`
      );
    })
    .join('\n');

  const guarded = variants.find((v) => v === 'slotguard');
  const ahead = variants.find((v) => v === 'slotguard, reserve-ahead');
  const powertools = variants.find((v) => v === 'Powertools idempotency');
  const units = (variant: string | undefined) => perRecipient(variant).writeUnits;
  const unitsMet = Math.max(units(guarded), units(ahead)) <= 1.1;
  const ratiosOf = (variant: string | undefined) =>
    latencies.flatMap((latencyMs) => {
      const row = find(variant, latencyMs);
      return row ? [{ latencyMs, ratio: ratio(row) }] : [];
    });
  const aheadRatios = ratiosOf(ahead);
  const throughputMet = aheadRatios.length > 0 && aheadRatios.every((r) => r.ratio >= 0.9);
  const listed = (list: readonly { latencyMs: number; ratio: number }[]) =>
    list.map((r) => `${n(r.ratio, 2)}× at ${r.latencyMs} ms`).join(', ');

  return `## Write units and send latency (concurrency ${concurrency}, ${n(recipients)} recipients)

Each variant fires a window of its own at concurrency ${concurrency}, once with every send taking
${latencies.map((l) => `${l} ms`).join(' and once with ')}, about what SES's SendEmail takes. Write units are what
DynamoDB reported each write consuming (ReturnConsumedCapacity TOTAL; dynalite computes it from item
sizes as DynamoDB does: one unit per started KB of the larger of the old and the new item), plus one
unit for each write whose condition failed, which DynamoDB bills too. **× unguarded** is the rate
over the unguarded loop's at the same send latency. **CPU / recipient** is this process's CPU time
(the variant's code and dynalite's thread) per recipient; **cores busy (machine)** is every
process's CPU time over the wall time (/proc/stat), other work on the machine included: at the
machine's core count the CPU bounds the rate, not the sends. One-minute load average
${n(load[0], 2)} before, ${n(load[1], 2)} after.

${table}

- **slotguard**: one conditional PutItem per recipient (its reservation, numbered) and, every 25
  emails sent or each second, one fenced UpdateItem of the window's slot item, which carries the
  run's done marks with its checkpoint; plus the claim and the completion, also UpdateItems of the
  slot item, and one Query per effect partition (16) for the run's tally. The slot item was at most
  ${n(largest)} bytes at the end of a fire, its summary included; the ${n(updates)} UpdateItems of it
  across these fires consumed ${n(updateUnits)} write units. Its done marks list at most 64 open
  numbers, so it does not grow with the window; a run that finds effects in doubt lists up to 50 of
  their key hashes in its progress, which can take the item over 1 KB and each checkpoint to 2 or 3 units.
- **slotguard, reserve-ahead** (RunOptions.reserveAhead): the same requests; each of the
  ${concurrency} effect workers reserves its next recipient while its current email is being sent, so a
  reservation's round trip overlaps the send before it instead of adding to it.
- **Powertools idempotency**: a conditional PutItem (IN_PROGRESS) and an UpdateItem (COMPLETED) per
  recipient.

What each costs on DynamoDB on-demand, at the ${ON_DEMAND_PRICE.region} price of
$${ON_DEMAND_PRICE.writePerMillion} per million write request units and $${ON_DEMAND_PRICE.readPerMillion} per million
read request units (Standard table class), the price since AWS halved on-demand throughput prices
in ${ON_DEMAND_PRICE.since} (<https://aws.amazon.com/dynamodb/pricing/on-demand/>; the figures as
quoted by <https://airbyte.com/data-engineering-resources/dynamodb-pricing>, 2025-07-21), over both
send latencies:

${costs}

What reserve-ahead costs after a crash: each worker holds its next recipient reserved while its
current email is in flight, so a run that dies leaves up to one more recipient per worker reserved
and never sent, ${concurrency} at concurrency ${concurrency}. Like the emails in flight (up to ${concurrency}) and those
sent since the last checkpoint (up to 25, or a second's worth), they are in doubt: reported and not
sent again, unless SES's events show they were never accepted (where the job records them).

Goals: at most 1.1 write units per recipient against Powertools idempotency's 2, ${unitsMet ? 'met' : 'not met'}:
slotguard ${n(units(guarded), 3)}, with reserve-ahead ${n(units(ahead), 3)}, Powertools idempotency
${n(units(powertools), 3)}. At least 0.9× the unguarded loop's throughput with reserve-ahead,
${throughputMet ? 'met' : 'not met'}: ${listed(aheadRatios)} (slotguard without it: ${listed(ratiosOf(guarded))}).`;
}
