import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { type DynamoEndpoint, startDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, schedulerEvent, TEST_SECRET, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { type ReplicaOptions, startReplica } from '../helpers/replica-process.js';

let dynamo: DynamoEndpoint;
let sink: SmtpSink;
beforeAll(async () => {
  [dynamo, sink] = await Promise.all([startDynamo(), startSmtpSink()]);
});
afterAll(async () => {
  await Promise.all([dynamo.close(), sink.close()]);
});

/** Runs a replica in a child process and SIGKILLs it once it has sent `killAfter` emails. */
async function runAndKill(
  options: Omit<ReplicaOptions, 'smtpPort'>,
  killAfter: number,
): Promise<{ signal: string | null; lastSent: number }> {
  const replica = startReplica({ ...options, smtpPort: sink.port });
  await replica.untilSent(killAfter);
  replica.process.kill('SIGKILL');
  const { signal } = await replica.exited;
  return { signal, lastSent: replica.sentCount };
}

describe('a replica killed mid-run', () => {
  it('is taken over after its lease, sends nobody twice, and accounts for every unsent email as in doubt', async () => {
    const window = new Date(Date.now() - 60_000).toISOString().slice(0, 17).concat('00Z');
    const total = 600;
    const table = await dynamo.freshTable();
    const killed = await runAndKill(
      { store: { backend: 'dynamodb', endpoint: dynamo.endpoint, table }, total, window },
      163,
    );
    expect(killed.signal).toBe('SIGKILL');
    const receivedBeforeTakeover = sink.total();
    expect(receivedBeforeTakeover).toBeGreaterThanOrEqual(163);

    // The survivor's clock is past the dead holder's lease (60 s from the system clock it used).
    const clock = new ManualClock(Date.now() + 63_000);
    const backend = testBackend(dynamo.client(), table);
    const smtp = smtpSender({ host: sink.host, port: sink.port });
    const emf = new EmfRecorder();
    const survivor = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(total), sender: smtp }),
      backend,
      {
        clock,
        emf,
      },
    );
    const result = await survivor.handler(schedulerEvent('weekly-report', window, 2));
    smtp.close();

    expect(result).toMatchObject({ status: 'completed', epoch: 2 });
    if (result.status !== 'completed') return;
    const { done, skipped, inDoubt, failed, inDoubtKeys } = result.summary;
    expect(emf.sum('LeaseTakeover')).toBe(1);
    expect(sink.duplicates()).toBe(0);
    expect(done + skipped + inDoubt + failed).toBe(total);
    expect(sink.total()).toBe(receivedBeforeTakeover + done);

    // Not done = in doubt + failed, exactly; here nothing was refused, so nothing failed.
    expect(failed).toBe(0);
    expect(inDoubt).toBeGreaterThanOrEqual(1);
    console.info(
      `killed after ${receivedBeforeTakeover} received; survivor: done ${done}, skipped ${skipped}, in doubt ${inDoubt}`,
    );
    expect(total - (done + skipped)).toBe(inDoubt + failed);
    expect(inDoubtKeys).toHaveLength(inDoubt);
    // Every customer who got nothing is in doubt; every other in-doubt customer got exactly one
    // email (sent, then killed before the mark): none was re-sent by the survivor.
    const hash = hmacEffectKeys(TEST_SECRET);
    const emailOf = new Map<string, string>();
    for await (const customer of syntheticCustomers(total)) emailOf.set(hash(customer.email), customer.email);
    const unsent = [...emailOf].filter(([, email]) => !sink.received.has(email)).map(([key]) => key);
    expect(unsent.every((key) => inDoubtKeys.includes(key))).toBe(true);
    const sentInDoubt = inDoubtKeys.filter((key) => !unsent.includes(key));
    expect(sentInDoubt.map((key) => sink.received.get(emailOf.get(key) ?? ''))).toEqual(
      sentInDoubt.map(() => 1),
    );
    expect(unsent.length + sentInDoubt.length).toBe(inDoubt);
  });
});
