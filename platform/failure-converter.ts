/**
 * The failure converter of every client and worker of the project, loaded by path (the SDK loads it in
 * the worker and inside the workflow sandbox): a failure's message and stack trace travel as an
 * encoded payload, which the payload codec encrypts. The failure's type, the activity's name and
 * whether it may be retried stay readable.
 */
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
