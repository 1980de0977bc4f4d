/**
 * An attempt-local undo log (compensation inside one attempt, as the saga's is inside one order):
 * each side effect an attempt takes outside the rows its CAS commits records its inverse here. When
 * the attempt aborts, the log runs LIFO before the retry; when it commits, the log is dropped.
 */
export class UndoLog {
  private readonly entries: { name: string; undo: () => Promise<void> }[] = [];

  record(name: string, undo: () => Promise<void>): void {
    this.entries.push({ name, undo });
  }

  get size(): number {
    return this.entries.length;
  }

  /** Runs every inverse, newest first. An inverse that fails is retried a few times, then reported. */
  async rollback(): Promise<void> {
    const failures: string[] = [];
    while (this.entries.length > 0) {
      const entry = this.entries.pop()!;
      let lastError: unknown;
      for (let i = 0; i < 3; i++) {
        try {
          await entry.undo();
          lastError = undefined;
          break;
        } catch (err) {
          lastError = err;
          await new Promise((r) => setTimeout(r, 20 * 2 ** i));
        }
      }
      if (lastError) failures.push(`${entry.name}: ${(lastError as Error).message}`);
    }
    if (failures.length) throw new Error(`undo log rollback failed: ${failures.join('; ')}`);
  }
}
