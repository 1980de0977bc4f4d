/**
 * Reading why a workflow task failed, from a run's history: shared by the sweeper (which decides how
 * to heal the run) and the chaos soak (which counts the failures).
 */
import type { LoadedDataConverter } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { decodeHistoryPayload } from './payload-codec';

/**
 * The SDK's Update-ordering bug (temporalio/sdk-core issue 1146): after a worker restart, an Update
 * and an activity completion in one workflow task can make the SDK's own Update state machine reject
 * the history on every replay. Not the saga's code. A reset replays the same events and fails the same
 * way, so the sweeper heals such a run with a new run from the order row instead.
 */
export const SDK_UPDATE_BUG = /Update machine does not handle this event/;

/** A task failure's message; one the failure converter sealed (`Encoded failure`) is opened first. */
export async function taskFailureMessage(
  converter: LoadedDataConverter,
  failure: temporal.api.failure.v1.IFailure | null | undefined,
): Promise<string> {
  if (!failure) return '';
  if (failure.encodedAttributes) {
    try {
      const attrs = (await decodeHistoryPayload(converter, failure.encodedAttributes)) as
        { message?: string } | undefined;
      if (typeof attrs?.message === 'string') return attrs.message;
    } catch {
      // unreadable: the message as stored
    }
  }
  return failure.message ?? '';
}
