/** The soak's output: one line on stdout, marked as the soak's (its servers and workers write too). */
export const say = (s: string): void => void process.stdout.write(`[chaos] ${s}\n`);
