/**
 * The happy path as recorded: a fixture whose history is a plain completed saga of the authorization
 * era (authorized, shipped, captured, confirmed), and what it counts. The
 * replay test checks that the fixture is the happy path; the docs check compares the figures that
 * docs/saga.md and docs/decisions.md give with these counts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

export const HAPPY_PATH_FIXTURE = path.resolve(
  __dirname,
  '..',
  'test',
  'fixtures',
  'histories',
  'auth-happy-path.json',
);

export interface HistoryCounts {
  /** History events, from the start to the close. */
  events: number;
  /** Completed workflow tasks: the points a Reset can go back to. */
  workflowTasks: number;
  /** The regular activities scheduled (each a round trip through the server), in order. */
  activities: string[];
  /** Markers: the local activities, which run inside a workflow task. */
  markers: number;
  /** The last event's type. */
  closedAs: string;
}

interface JsonEvent {
  eventType?: string;
  activityTaskScheduledEventAttributes?: { activityType?: { name?: string } };
}

/** Counts a history as exported in JSON (the fixtures' format). */
export function countHistory(json: { events?: JsonEvent[] }): HistoryCounts {
  const events = json.events ?? [];
  const ofType = (type: string): JsonEvent[] => events.filter((e) => e.eventType === `EVENT_TYPE_${type}`);
  return {
    events: events.length,
    workflowTasks: ofType('WORKFLOW_TASK_COMPLETED').length,
    activities: ofType('ACTIVITY_TASK_SCHEDULED').map(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name ?? '?',
    ),
    markers: ofType('MARKER_RECORDED').length,
    closedAs: events.at(-1)?.eventType ?? 'none',
  };
}

export function happyPathCounts(): HistoryCounts {
  return countHistory(JSON.parse(readFileSync(HAPPY_PATH_FIXTURE, 'utf8')) as { events?: JsonEvent[] });
}
