import { ApplicationFailure } from '@temporalio/common';
import type { ErrorType } from '../domain/failures';

/** A business failure of one of the typed kinds (domain/failures.ts): never retried. */
export function businessFailure(
  type: ErrorType,
  message: string,
  details?: unknown,
  cause?: Error,
): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message,
    nonRetryable: true,
    details: details === undefined ? [] : [details],
    cause,
  });
}
