import { loadavg } from 'node:os';
import { type DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { WEEKLY_REPORT_JOB_ID } from '../functions/weekly-report/job.js';
import { slotPartitionKey, slotSortKey, TableLayout } from '../shared/backends/dynamodb/table-layout.js';
import { itemBytes, type RequestMeter } from './request-meter.js';
import { type Measured, measureFire, median, type Variant } from './variants.js';

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

/** One variant's fire at one send latency, in one round. */
export interface SendLatencyRow {
  readonly variant: string;
  readonly latencyMs: number;
  readonly round: number;
  readonly recipients: number;
  readonly m: Measured;
  /** A slotguard variant's slot item. */
  readonly slotItem?: SlotItemReport;
}

/** The section's fires, and the machine's load around them (it is shared: the rates depend on it). */
export interface SendLatencyResult {
  readonly rows: readonly SendLatencyRow[];
  readonly concurrency: number;
  readonly rounds: number;
  /** One-minute load average before and after the fires. */
  readonly load: readonly [number, number];
}

export interface SendLatencyOptions {
  readonly client: DynamoDBClient;
  readonly meter: RequestMeter;
  /** In the order they fire at each latency; the first is the baseline (the unguarded loop). */
  readonly variants: readonly Variant[];
  readonly recipients: number;
  readonly concurrency: number;
  readonly latenciesMs: readonly number[];
  /**
   * Every variant fires once per latency in each round, the rounds one after another, so a change in
   * the shared machine's load falls on every variant alike; the section shows each one's median.
   */
  readonly rounds: number;
  /** A window no variant has used. */
  readonly window: () => string;
  readonly log: (line: string) => void;
}

const n = (value: number, digits = 0) =>
  value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/**
 * Every variant fires one window of `recipients` at `concurrency`, once per send latency and round:
 * what the guard costs in DynamoDB write units, and how much of the unguarded loop's throughput it
 * keeps when a send takes as long as an SES call does.
 */
export async function sendLatencyRuns(o: SendLatencyOptions): Promise<SendLatencyResult> {
  const rows: SendLatencyRow[] = [];
  const loadBefore = loadavg()[0] ?? 0;
  for (let round = 1; round <= o.rounds; round++) {
    for (const latencyMs of o.latenciesMs) {
      for (const variant of o.variants) {
        rows.push(await fireOnce(o, variant, latencyMs, round));
      }
    }
  }
  return { rows, concurrency: o.concurrency, rounds: o.rounds, load: [loadBefore, loadavg()[0] ?? 0] };
}

async function fireOnce(
  o: SendLatencyOptions,
  variant: Variant,
  latencyMs: number,
  round: number,
): Promise<SendLatencyRow> {
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
  o.log(
    `send ${latencyMs} ms c=${o.concurrency} round ${round} ${variant.name}: ${n(o.recipients / m.seconds)} recipients/s, ` +
      `${n(m.writeUnits / o.recipients, 3)} write units/recipient, ` +
      `CPU ${n((m.cpuSeconds * 1000) / o.recipients, 2)} ms/recipient, ` +
      `machine ${n(m.machineCpuSeconds / m.seconds, 2)} cores busy, ` +
      `write round trip ${n(m.writeMs.p50, 1)} ms median, ${n(m.writeMs.p90, 1)} ms p90` +
      (slotItem ? `; slot item ${bytes} bytes, ${updates} UpdateItems for ${units} units` : ''),
  );
  return {
    variant: variant.name,
    latencyMs,
    round,
    recipients: o.recipients,
    m,
    ...(slotItem ? { slotItem } : {}),
  };
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

/** A variant's fires at one latency, over the rounds. */
interface Cell {
  readonly variant: string;
  readonly latencyMs: number;
  readonly fires: readonly SendLatencyRow[];
  /** The median of the fires' rates, in recipients per second. */
  readonly rate: number;
  readonly minRate: number;
  readonly maxRate: number;
}

function cellOf(rows: readonly SendLatencyRow[], variant: string, latencyMs: number): Cell | undefined {
  const fires = rows.filter((r) => r.variant === variant && r.latencyMs === latencyMs);
  if (fires.length === 0) return undefined;
  const rates = fires.map((r) => r.recipients / r.m.seconds);
  return {
    variant,
    latencyMs,
    fires,
    rate: median(rates),
    minRate: Math.min(...rates),
    maxRate: Math.max(...rates),
  };
}

/** Totals over some fires: per recipient, and the machine's load over their wall time. */
function totals(fires: readonly SendLatencyRow[]) {
  const recipients = fires.reduce((sum, r) => sum + r.recipients, 0);
  const sum = (pick: (m: Measured) => number) => fires.reduce((total, r) => total + pick(r.m), 0);
  const writeUnits = sum((m) => m.writeUnits) / recipients;
  const readUnits = sum((m) => m.readUnits) / recipients;
  return {
    requests: sum((m) => m.requests) / recipients,
    writeUnits,
    readUnits,
    dollarsPerMillion:
      writeUnits * ON_DEMAND_PRICE.writePerMillion + readUnits * ON_DEMAND_PRICE.readPerMillion,
    cpuMs: (sum((m) => m.cpuSeconds) * 1000) / recipients,
    coresBusy: sum((m) => m.machineCpuSeconds) / sum((m) => m.seconds),
    writeMs: {
      p50: median(fires.map((r) => r.m.writeMs.p50).filter((ms) => !Number.isNaN(ms))),
      p90: median(fires.map((r) => r.m.writeMs.p90).filter((ms) => !Number.isNaN(ms))),
    },
    sends: [...new Set(fires.map((r) => r.m.sends))],
  };
}

/** The section's Markdown: the table, what each variant costs on DynamoDB, and the issue's goals. */
export function sendLatencySection({ rows, concurrency, rounds, load }: SendLatencyResult): string {
  const variants = [...new Set(rows.map((r) => r.variant))];
  const latencies = [...new Set(rows.map((r) => r.latencyMs))];
  const baseline = variants[0];
  const recipients = rows[0]?.recipients ?? 0;
  const cells = latencies.flatMap((latencyMs) =>
    variants.flatMap((variant) => {
      const cell = cellOf(rows, variant, latencyMs);
      return cell ? [cell] : [];
    }),
  );
  const ratio = (cell: Cell) => {
    const base = baseline === undefined ? undefined : cellOf(rows, baseline, cell.latencyMs);
    return base ? cell.rate / base.rate : Number.NaN;
  };

  const table = [
    `| variant | send | recipients/s (median of ${rounds}) | lowest – highest | × unguarded | requests / recipient | write units / recipient | emails sent (each fire) | write round trip (median, p90) | CPU / recipient | cores busy (machine) |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...cells.map((cell) => {
      const t = totals(cell.fires);
      const roundTrip = Number.isNaN(t.writeMs.p50)
        ? '–'
        : `${n(t.writeMs.p50, 1)} ms, ${n(t.writeMs.p90, 1)} ms`;
      return (
        `| ${cell.variant} | ${cell.latencyMs} ms | ${n(cell.rate)} | ${n(cell.minRate)} – ${n(cell.maxRate)} | ` +
        `${n(ratio(cell), 2)}× | ${n(t.requests, 3)} | ${n(t.writeUnits, 3)} | ${t.sends.map((s) => n(s)).join(', ')} | ` +
        `${roundTrip} | ${n(t.cpuMs, 2)} ms | ${n(t.coresBusy, 2)} |`
      );
    }),
  ].join('\n');

  const slotItems = rows.flatMap((r) => (r.slotItem ? [r.slotItem] : []));
  const largest = Math.max(0, ...slotItems.map((s) => s.bytes));
  const updates = slotItems.reduce((sum, s) => sum + s.updates, 0);
  const updateUnits = slotItems.reduce((sum, s) => sum + s.units, 0);

  const perVariant = (variant: string | undefined) => totals(rows.filter((r) => r.variant === variant));
  const costs = variants
    .map((variant) => {
      const t = perVariant(variant);
      return (
        `- **${variant}**: ${n(t.writeUnits, 3)} write units and ${n(t.readUnits, 3)} read units per recipient: ` +
        `$${n(t.dollarsPerMillion, 2)} per million recipients.`
      );
    })
    .join('\n');

  const guarded = variants.find((v) => v === 'slotguard');
  const ahead = variants.find((v) => v === 'slotguard, reserve-ahead');
  const powertools = variants.find((v) => v === 'Powertools idempotency');
  const units = (variant: string | undefined) => perVariant(variant).writeUnits;
  const unitsMet = Math.max(units(guarded), units(ahead)) <= 1.1;
  const ratiosOf = (variant: string | undefined) =>
    cells
      .filter((cell) => cell.variant === variant)
      .map((cell) => ({ latencyMs: cell.latencyMs, ratio: ratio(cell) }));
  const aheadRatios = ratiosOf(ahead);
  const throughputMet = aheadRatios.length > 0 && aheadRatios.every((r) => r.ratio >= 0.9);
  const listed = (list: readonly { latencyMs: number; ratio: number }[]) =>
    list.map((r) => `${n(r.ratio, 2)}× at ${r.latencyMs} ms`).join(', ');

  return `## Write units and send latency (concurrency ${concurrency}, ${n(recipients)} recipients)

Each variant fires a window of its own at concurrency ${concurrency}, with every send taking
${latencies.map((l) => `${l} ms`).join(' and then ')} (a stand-in for an SES call), in ${rounds} rounds one
after another; the rates are each one's median, the rest is over all its fires. Write units are what
DynamoDB reported each write consuming (ReturnConsumedCapacity TOTAL; dynalite computes it from item
sizes as DynamoDB does: one unit per started KB of the larger of the old and the new item), plus one
unit for each write whose condition failed, which DynamoDB bills too. **× unguarded** is the median
rate over the unguarded loop's at the same send latency. **write round trip** is from a DynamoDB
write sent to its answer, as the variant's code waits for it (the fires' medians of each); **CPU / recipient** is this
process's CPU time (the variant's code and dynalite's thread) per recipient; **cores busy
(machine)** is every process's CPU time over the wall time (/proc/stat), other work on the machine
included: at the machine's core count, the CPU bounds the rate and stretches every round trip, not
the sends. One-minute load average ${n(load[0], 2)} before, ${n(load[1], 2)} after.

${table}

- **slotguard**: one conditional PutItem per recipient (its reservation, numbered) and, every 25
  emails sent or each second, one fenced UpdateItem of the window's slot item, which carries the
  run's done marks with its checkpoint; plus the claim and the completion, also UpdateItems of the
  slot item, and at the end one Query of the window's slot partition (the done marks) and one per
  effect partition (16) for the run's tally. The slot item was at most
  ${n(largest)} bytes at the end of a fire, its summary included; the ${n(updates)} UpdateItems of it
  in these fires consumed ${n(updateUnits)} write units. Its done marks list at most 64 open numbers,
  so it does not grow with the window; a run that finds effects in doubt lists up to 50 of their key
  hashes in its progress, which can take the item over 1 KB and each checkpoint to 2 or 3 units.
- **slotguard, reserve-ahead** (RunOptions.reserveAhead): the same requests; each of the
  ${concurrency} effect workers reserves its next recipient while its current email is being sent, so
  a reservation's round trip overlaps the send before it instead of adding to it, as long as it is
  the shorter of the two.
- **Powertools idempotency**: a conditional PutItem (IN_PROGRESS) and an UpdateItem (COMPLETED) per
  recipient.

What each costs on DynamoDB on-demand, at the ${ON_DEMAND_PRICE.region} price of
$${ON_DEMAND_PRICE.writePerMillion} per million write request units and $${ON_DEMAND_PRICE.readPerMillion} per million
read request units (Standard table class), the price since AWS halved on-demand throughput prices
in ${ON_DEMAND_PRICE.since} (<https://aws.amazon.com/dynamodb/pricing/on-demand/>; the figures as
quoted by <https://airbyte.com/data-engineering-resources/dynamodb-pricing>, 2025-07-21):

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
