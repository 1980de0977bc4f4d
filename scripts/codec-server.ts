/**
 * The codec server on its own (docker compose runs it; npm start runs one in its own process):
 *   PAYLOAD_KEYS=… CODEC_SERVER_TOKEN=… npx tsx scripts/codec-server.ts
 * The keys as every worker has them (PAYLOAD_KEYS, PAYLOAD_KEY_FILE or .data/payload-keys.json); the
 * token every caller must present (at least 16 characters); CODEC_SERVER_ORIGINS, the Web UI origins
 * allowed to call it from a browser (comma-separated; default TEMPORAL_UI_URL's origin);
 * CODEC_SERVER_HOST (127.0.0.1) and CODEC_SERVER_PORT (8234).
 */
import { DEFAULT_PORTS, readConfig } from '../ops/config';
import { startCodecServer } from '../ops/codec-server';
import { EncryptionCodec, requirePayloadKeys } from '../platform/payload-codec';

async function main(): Promise<void> {
  const env = process.env;
  const token = env.CODEC_SERVER_TOKEN ?? '';
  if (token.length < 16)
    throw new Error('CODEC_SERVER_TOKEN must be set, at least 16 characters (openssl rand -hex 24)');
  const keys = requirePayloadKeys();
  const origins = (env.CODEC_SERVER_ORIGINS ?? new URL(readConfig().uiUrl).origin)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const server = await startCodecServer({
    codec: new EncryptionCodec(keys),
    token,
    allowOrigins: origins,
    host: env.CODEC_SERVER_HOST ?? '127.0.0.1',
    port: Number(env.CODEC_SERVER_PORT ?? DEFAULT_PORTS.codecServer),
    log: (line) => void process.stderr.write(`${line}\n`),
  });
  process.stdout.write(
    `codec server: listening on ${server.url} for ${origins.join(', ')}; keys from ${keys.source === 'PAYLOAD_KEYS' ? 'PAYLOAD_KEYS' : keys.source}, current ${keys.current}\n`,
  );
  const stop = () => void server.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err: Error) => {
  process.stderr.write(`codec server: ${err.message}\n`);
  process.exit(1);
});
