import {
  type DynamoDBClient,
  InternalServerError,
  ProvisionedThroughputExceededException,
} from '@aws-sdk/client-dynamodb';

export interface FaultPlan {
  /** Share of requests answered with ProvisionedThroughputExceededException (throttling). */
  readonly throttle?: number;
  /** Share answered with a 500 InternalServerError before reaching the server. */
  readonly serverError?: number;
  /** Share that reach the server and commit, but whose reply is lost (a timeout). */
  readonly lostReply?: number;
  /** Seed of the fault sequence, printed on failure so a run can be replayed. */
  readonly seed: number;
}

export interface FaultCounts {
  throttled: number;
  serverErrors: number;
  lostReplies: number;
  requests: number;
}

/**
 * Injects the faults a real DynamoDB produces and dynalite cannot on demand, into a client that
 * still talks to the real server. It sits inside the SDK's retry middleware, so the production
 * retry policy (jittered backoff) handles them exactly as it would in AWS.
 */
export function injectFaults(client: DynamoDBClient, plan: FaultPlan): FaultCounts {
  const counts: FaultCounts = { throttled: 0, serverErrors: 0, lostReplies: 0, requests: 0 };
  const random = mulberry32(plan.seed);
  client.middlewareStack.add(
    (next) => async (args) => {
      counts.requests++;
      const roll = random();
      const throttle = plan.throttle ?? 0;
      const serverError = plan.serverError ?? 0;
      const lostReply = plan.lostReply ?? 0;
      if (roll < throttle) {
        counts.throttled++;
        throw new ProvisionedThroughputExceededException({
          message: 'injected: the level of configured provisioned throughput for the table was exceeded',
          $metadata: { httpStatusCode: 400 },
        });
      }
      if (roll < throttle + serverError) {
        counts.serverErrors++;
        throw new InternalServerError({
          message: 'injected: internal server error',
          $metadata: { httpStatusCode: 500 },
        });
      }
      const result = await next(args);
      if (roll < throttle + serverError + lostReply) {
        counts.lostReplies++;
        throw Object.assign(new Error('injected: the reply was lost after the write committed'), {
          name: 'TimeoutError',
          $metadata: {},
        });
      }
      return result;
    },
    { step: 'finalizeRequest', priority: 'low', name: 'slotguardFaultInjection' },
  );
  return counts;
}

/** A small seeded PRNG, so a fault sequence replays from its seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
