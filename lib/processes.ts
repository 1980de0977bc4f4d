/** Starting the project's own processes (the provider) as children, for tests, the bench and the chaos soak. */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/** Starts provider/server.ts as its own process; resolves with its payment and admin URLs once it listens. */
export async function startProviderProcess(env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; url: string; adminUrl: string }> {
  const child = spawn(process.execPath, [require.resolve('tsx/cli'), path.join(ROOT, 'provider', 'server.ts')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const urls = await new Promise<{ url: string; adminUrl: string }>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      if (buf.length < 100_000) buf += chunk.toString('utf8');
      const m = /"event":"listening","url":"([^"]+)","adminUrl":"([^"]+)"/.exec(buf);
      if (m) resolve({ url: m[1]!, adminUrl: m[2]! });
    });
    child.once('exit', (code) => reject(new Error(`provider exited with code ${code}`)));
  });
  child.stdout!.resume();
  return { child, ...urls };
}

export async function stopProcess(child: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}
