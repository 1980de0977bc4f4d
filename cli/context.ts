/**
 * What every command of client.ts shares, built once per run: the configuration and its Web UI links,
 * the Temporal client (connected on first use), the stores, the payment provider's client, the
 * output, the exit codes and CliError.
 */
import { Client, Connection } from '@temporalio/client';
import { dataConverterFor, requirePayloadKeys } from '../platform/payload-codec';
import { activeTracing } from '../platform/tracing';
import { listUrl, runUrl, type AppConfig } from '../ops/config';
import { openOrderStore, type OrderStore, type StoreRole } from '../orders/order-store';
import { createProviderClient, type AuthorizationClient, type ProviderClient } from '../provider/client';

export const EXIT = { ok: 0, notCompleted: 1, invalid: 2, duplicate: 3 } as const;

/** A user error: printed on stderr, naming the field, with the given exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

export interface Out {
  out(line: string): void;
  err(line: string): void;
}

/** One run's context, handed to every command. */
export interface CliContext {
  readonly cfg: AppConfig;
  readonly io: Out;
  /** The Web UI's pages: a run (its history, with a run ID), a visibility query's list, a Schedule. */
  readonly links: {
    run(workflowId: string, runId?: string): string;
    list(query: string): string;
    schedule(scheduleId: string): string;
  };
  /** The Temporal client: the shared one, else connected on the first call (once per run). */
  temporal(): Promise<Client>;
  /** The store of `role`, or undefined without a URL for it. */
  openStore(role: StoreRole, opts?: { max?: number }): OrderStore | undefined;
  /** The store of `role` for `command`; without a URL for it the command cannot run (exit 1). */
  needStore(role: StoreRole, command: string, max?: number): OrderStore;
  /** The payment provider's client (PROVIDER_URL, PROVIDER_API_KEY, PROVIDER_TIMEOUT_MS), made on first use. */
  provider(): ProviderClient & AuthorizationClient;
  /** Receives the command's exit code. */
  done(code: number): void;
}

/** The context of one run; `shared.client`: a Temporal client to reuse (a long-lived caller, such as the chaos soak's operators). */
export function createContext(
  cfg: AppConfig,
  io: Out,
  shared: { client?: Client },
  done: (code: number) => void,
): CliContext {
  let client: Promise<Client> | undefined = shared.client ? Promise.resolve(shared.client) : undefined;
  let provider: (ProviderClient & AuthorizationClient) | undefined;
  const openStore = (role: StoreRole, opts?: { max?: number }): OrderStore | undefined =>
    openOrderStore(cfg, role, opts);
  return {
    cfg,
    io,
    links: {
      run: (workflowId, runId) => runUrl(cfg, workflowId, runId),
      list: (query) => listUrl(cfg, query),
      schedule: (scheduleId) => `${cfg.uiUrl}/namespaces/${encodeURIComponent(cfg.namespace)}/schedules/${scheduleId}`,
    },
    temporal: () => (client ??= connect(cfg)),
    openStore,
    needStore(role, command, max = 1) {
      const store = openStore(role, { max });
      if (store) return store;
      const variable = role === 'reader' ? 'READER_DATABASE_URL or DATABASE_URL' : 'DATABASE_URL';
      throw new CliError(`${command} needs ${variable} (or a running "npm start")`, EXIT.notCompleted);
    },
    provider: () =>
      (provider ??= createProviderClient({
        baseUrl: cfg.providerUrl,
        apiKey: cfg.providerApiKey,
        timeoutMs: cfg.providerTimeoutMs,
        // The provider's log lines say who called.
        clientName: 'client.ts',
      })),
    done,
  };
}

/** A client with the payload codec's data converter: payloads are sealed and opened with the keys this process has. */
async function connect(cfg: AppConfig): Promise<Client> {
  let dataConverter;
  try {
    dataConverter = dataConverterFor(requirePayloadKeys());
  } catch (err) {
    throw new CliError((err as Error).message, EXIT.notCompleted);
  }
  try {
    const connection = await Connection.connect({ ...cfg.temporal.connection, connectTimeout: '5s' });
    // Tracing on (client.ts's main started it): each start, signal and query is a span, its context in the headers.
    const tracing = activeTracing();
    return new Client({
      connection,
      namespace: cfg.namespace,
      dataConverter,
      ...(tracing ? { interceptors: tracing.clientInterceptors() } : {}),
    });
  } catch (err) {
    throw new CliError(
      `cannot reach Temporal at ${cfg.temporal.summary}: ${(err as Error).message}${cfg.temporal.external ? '' : ' (is "npm start" running?)'}`,
      EXIT.notCompleted,
    );
  }
}
