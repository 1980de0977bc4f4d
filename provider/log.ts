/** The provider's log: one JSON line per event on stdout (`"listening"` is the one its starters wait for). */
export function log(event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ ts: new Date().toISOString(), svc: 'provider', event, ...fields })}\n`);
}
