/** The bench's saga-cost targets: the best peer engine in each figure, and each target's verdict. */
import { describe, expect, it } from 'vitest';
import type { EngineSide } from '../bench/engines';
import type { SagaOverheadResult, Side } from '../bench/saga-overhead';
import { bestPeer, sagaCostTargets } from '../bench/targets';

const engine = (name: string, cpuTotal: number, perSecond: number, idleP50: number): EngineSide => ({
  engine: name,
  idle: { p50: idleP50, p90: idleP50 },
  perSecond,
  cpuMsPerOrder: { worker: cpuTotal },
  cpuTotal,
  persists: '',
});
const side = (cpuTotal: number, perSecond: number): Side => ({
  perSecond,
  p50: 100,
  p99: 200,
  cpuMs: { worker: cpuTotal },
  cpuTotal,
});
const spread = { min: 1, max: 1 };
/** A saga-overhead result with only what the saga-cost targets read filled in meaningfully. */
const saga = (cpu: number, perSecond: number, idle: number, cheapCpu: number): SagaOverheadResult => {
  const cost = { events: 0, workflowTasks: 0, searchAttributeUpdates: 0, timers: 0 };
  const kinds = { local: 0, regular: 0 };
  return {
    temporal: 'dev',
    saga: side(cpu, perSecond),
    floor: side(1, 1),
    cheap: side(cheapCpu, 1),
    like: side(1, 1),
    plain: side(1, 1),
    codecRatio: 1,
    ratio: 1,
    p50Ratio: 1,
    likeRatio: 1,
    likeP50Ratio: 1,
    likeSpread: { throughput: spread, p50: spread, cpu: spread },
    floorSpread: { throughput: spread, p50: spread, cpu: spread },
    likeCpuRatio: 1,
    idle: { saga: idle, floor: 1, cheap: 1, like: 1, plain: 1 },
    idleSagaP90: idle,
    historyEvents: { saga: 0, floor: 0, cheap: 0, like: 0 },
    kinds: { saga: kinds, like: kinds, cheap: kinds },
    cost: { saga: cost, like: cost, cheap: cost },
  };
};
const engines = [
  engine('plain Node, no engine', 10, 160, 18),
  engine('DBOS 5.3.0', 22, 78, 41),
  engine('Restate 1.7.12', 20, 89, 40),
];

describe('the saga-cost targets', () => {
  it('take the best peer in each figure: the lower CPU and idle p50, the higher throughput', () => {
    expect(bestPeer(engines)).toEqual({
      cpu: { engine: 'Restate', value: 20 },
      perSecond: { engine: 'Restate', value: 89 },
      idleP50: { engine: 'Restate', value: 40 },
    });
    const mixed = [engine('DBOS 5', 18, 95, 45), engine('Restate 1', 20, 89, 40)];
    expect(bestPeer(mixed)).toEqual({
      cpu: { engine: 'DBOS', value: 18 },
      perSecond: { engine: 'DBOS', value: 95 },
      idleP50: { engine: 'Restate', value: 40 },
    });
  });

  it('are none without both peers and plain Node', () => {
    expect(bestPeer(engines.slice(0, 2))).toBeUndefined();
    expect(sagaCostTargets(saga(1, 1, 1, 1), engines.slice(1))).toEqual([]);
  });

  it('pass at their thresholds and fail beyond them', () => {
    // 1.5 × 20 = 30 ms; 0.67 × 89 = 59.63/s; 1.5 × 40 = 60 ms; 1.25 × (14 + 10) = 30 ms.
    const at = sagaCostTargets(saga(30, 59.63, 60, 14), engines);
    expect(at.map((t) => t.pass)).toEqual([true, true, true, true]);
    const beyond = sagaCostTargets(saga(30.1, 59.6, 60.1, 14), engines);
    expect(beyond.map((t) => t.pass)).toEqual([false, false, false, false]);
    expect(beyond[3]!.detail).toBe('30.1 ms vs 14 + 10 = 24 ms (1.25×)');
  });

  it("say where Temporal's own limit stands: the cheapest floor with the plain work, against the peer", () => {
    const [cpu, perSecond, idle] = sagaCostTargets(saga(30.1, 59.6, 60.1, 14), engines);
    expect(cpu!.detail).toBe('30.1 ms vs Restate 20 ms (1.51×); cheapest floor + plain work 24 ms (1.2×)');
    expect(perSecond!.detail).toBe('59.6/s vs Restate 89/s (0.67×); cheapest floor, no work, 1/s (0.01×)');
    // The cheapest floor's idle p50 (1 ms) + plain Node's (18 ms).
    expect(idle!.detail).toBe('60.1 ms vs Restate 40 ms (1.5×); cheapest floor + plain work 19 ms (0.48×)');
  });
});
