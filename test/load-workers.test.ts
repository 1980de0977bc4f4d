/** `load --workers`: which worker processes count as polling, and the wait for them (a fake server). */
import type { Client } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { describe, expect, it } from 'vitest';
import { awaitWorkerProcesses, workerProcesses } from '../orders/load';

const { TaskQueueType } = temporal.api.enums.v1;
const ago = (ms: number) => msToTs(Date.now() - ms);

/** A client whose describeTaskQueue answers from `answers(call)`: pollers by task queue type. */
function fakeClient(answers: (call: number) => Partial<Record<number, { identity: string; agoMs: number }[]>>): {
  client: Client;
  calls: temporal.api.enums.v1.TaskQueueType[];
} {
  const calls: temporal.api.enums.v1.TaskQueueType[] = [];
  let round = 0;
  const client = {
    options: { namespace: 'default' },
    workflowService: {
      describeTaskQueue: async (req: { taskQueueType: temporal.api.enums.v1.TaskQueueType }) => {
        calls.push(req.taskQueueType);
        if (req.taskQueueType === TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW) round++;
        const pollers = answers(round)[req.taskQueueType] ?? [];
        return { pollers: pollers.map((p) => ({ identity: p.identity, lastAccessTime: ago(p.agoMs) })) };
      },
    },
  } as unknown as Client;
  return { client, calls };
}

describe('the worker processes load --workers counts', () => {
  it('are those that polled workflow or activity tasks in the last 90 s, each once', async () => {
    const { client, calls } = fakeClient(() => ({
      [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW]: [
        { identity: 'w1', agoMs: 1_000 },
        { identity: 'gone', agoMs: 120_000 },
      ],
      [TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]: [
        { identity: 'w1', agoMs: 2_000 },
        { identity: 'w2', agoMs: 5_000 }, // its workflow polls went to other partitions
      ],
    }));
    expect(await workerProcesses(client, 'orders')).toEqual(['w1', 'w2']);
    expect(calls).toEqual([TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]);
  });

  it('are asked for again until enough are seen, saying how many so far', async () => {
    const { client } = fakeClient((round) => ({
      [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW]: [
        { identity: 'w1', agoMs: 0 },
        ...(round >= 3 ? [{ identity: 'w3', agoMs: 0 }] : []),
      ],
      [TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]: round >= 2 ? [{ identity: 'w2', agoMs: 0 }] : [],
    }));
    const heard: number[] = [];
    const seen = await awaitWorkerProcesses(client, 'orders', 3, {
      waitMs: 5_000,
      everyMs: 1,
      onWait: (n) => heard.push(n),
    });
    expect(seen).toEqual(['w1', 'w2', 'w3']);
    expect(heard).toEqual([1, 2]);
  });

  it('stop being asked for after the wait, with what was seen (the command then refuses)', async () => {
    const { client } = fakeClient(() => ({ [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW]: [{ identity: 'w1', agoMs: 0 }] }));
    const heard: number[] = [];
    const seen = await awaitWorkerProcesses(client, 'orders', 2, {
      waitMs: 30,
      everyMs: 5,
      onWait: (n) => heard.push(n),
    });
    expect(seen).toEqual(['w1']);
    expect(heard.length).toBeGreaterThan(0);
    expect(heard.every((n) => n === 1)).toBe(true);
  });

  it('a check the server fails is asked again while the wait lasts; one failing at its end throws', async () => {
    let calls = 0;
    const flaky = {
      options: { namespace: 'default' },
      workflowService: {
        describeTaskQueue: async () => {
          calls++;
          if (calls <= 2) throw new Error('unavailable');
          return { pollers: [{ identity: 'w1', lastAccessTime: ago(0) }] };
        },
      },
    } as unknown as Client;
    expect(await awaitWorkerProcesses(flaky, 'orders', 1, { waitMs: 5_000, everyMs: 1 })).toEqual(['w1']);
    const down = {
      options: { namespace: 'default' },
      workflowService: { describeTaskQueue: async () => Promise.reject(new Error('unavailable')) },
    } as unknown as Client;
    await expect(awaitWorkerProcesses(down, 'orders', 1, { waitMs: 20, everyMs: 5 })).rejects.toThrow('unavailable');
  });
});
