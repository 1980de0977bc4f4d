/**
 * The saga's own cost per order, counted (not timed): what one happy-path order adds to Temporal's
 * history (events, workflow tasks, search attribute updates, timers), against the like-for-like floor
 * doing the same six steps and the cheapest floor (the six as local activities).
 */
import type { temporal } from '@temporalio/proto';
import { temporal as proto } from '@temporalio/proto';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
const { EventType } = proto.api.enums.v1;

/** One workflow's cost, from its history. */
export interface Cost {
  events: number;
  workflowTasks: number;
  searchAttributeUpdates: number;
  timers: number;
}

/** What a run's history says of its cost. */
export function historyCost(events: HistoryEvent[]): Cost {
  const count = (t: temporal.api.enums.v1.EventType): number => events.filter((e) => e.eventType === t).length;
  return {
    events: events.length,
    workflowTasks: count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
    searchAttributeUpdates: count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
    timers: count(EventType.EVENT_TYPE_TIMER_STARTED),
  };
}

/** The cost table's lines: the saga, the like-for-like floor, what the saga adds to it, the cheapest floor. */
export function costTable(saga: Cost, like: Cost, cheap: Cost): string[] {
  const rows: [string, keyof Cost][] = [
    ['history events', 'events'],
    ['workflow tasks', 'workflowTasks'],
    ['search attribute updates', 'searchAttributeUpdates'],
    ['timers started', 'timers'],
  ];
  const w = Math.max(...rows.map(([l]) => l.length));
  return [
    `${'per order'.padEnd(w)}  saga  like-for-like floor  saga's own  cheapest floor`,
    ...rows.map(
      ([label, k]) =>
        `${label.padEnd(w)}  ${String(saga[k]).padStart(4)}  ${String(like[k]).padStart(19)}  ${String(saga[k] - like[k]).padStart(10)}  ${String(cheap[k]).padStart(14)}`,
    ),
  ];
}
