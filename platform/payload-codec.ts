/**
 * The payload codec: every payload a client or worker of this project hands to Temporal (an order's
 * input, each activity's arguments and result, Update arguments, memos, summaries, encoded failure
 * messages) is compressed and then encrypted with AES-256-GCM before it leaves the process, so the
 * Temporal server's database, its backups, the CLI and the Web UI without the codec server see only
 * ciphertext. What stays readable by design is listed in SECURITY.md.
 *
 * Keys rotate: each encrypted payload names the ID of the key that sealed it (and the ID is bound
 * into the ciphertext as associated data, so it cannot be swapped). New payloads use the current key;
 * the others only decode. A payload without this codec's encoding (one the Temporal CLI or another
 * client wrote in the clear) passes through as it is.
 *
 * Keys come from PAYLOAD_KEYS (`id:base64,id:base64`, the first one current) or from a key file
 * (PAYLOAD_KEY_FILE, default .data/payload-keys.json: `{ "current": id, "keys": { id: base64 } }`,
 * mode 0600), which `npm start` creates on its first run and `client.ts keys rotate` extends.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { DataConverter, LoadedDataConverter, Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

/** The metadata `encoding` of a payload this codec sealed. */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
const KEY_ID = 'encryption-key-id';
const COMPRESSION = 'compression';
/**
 * Below this many bytes compression does not pay for itself: a one-line order (about 180 bytes) came
 * out 14 bytes smaller, and deflate took three quarters of its seal's time.
 */
export const COMPRESS_FROM = 512;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** The default key file, under the git-ignored .data/ directory. */
export const DEFAULT_KEY_FILE = path.resolve(__dirname, '..', '.data', 'payload-keys.json');

export interface PayloadKeys {
  /** The ID of the key new payloads are sealed with. */
  current: string;
  /** Every key this process can open, by ID (32 bytes each). */
  keys: Map<string, Buffer>;
  /** Where they came from, for messages: `PAYLOAD_KEYS` or the key file's path. */
  source: string;
}

/** A payload this process cannot open, or a key set it cannot use; names the key ID or the field. */
export class PayloadKeyError extends Error {
  override name = 'PayloadKeyError';
}

const KEY_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

function keyBytes(id: string, b64: string, source: string): Buffer {
  if (!KEY_ID_PATTERN.test(id))
    throw new PayloadKeyError(`${source}: key ID "${id}" must be 1–64 letters, digits, ".", "_" or "-"`);
  const key = Buffer.from(b64, 'base64');
  if (key.length !== 32 || key.toString('base64') !== b64.replace(/\s/g, ''))
    throw new PayloadKeyError(
      `${source}: key "${id}" must be 32 bytes in base64 (44 characters), got ${key.length} bytes`,
    );
  return key;
}

/** PAYLOAD_KEYS: `id:base64[,id:base64…]`, the first one current. */
export function parseKeyList(text: string, source = 'PAYLOAD_KEYS'): PayloadKeys {
  const keys = new Map<string, Buffer>();
  let current: string | undefined;
  for (const item of text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const at = item.indexOf(':');
    if (at < 1) throw new PayloadKeyError(`${source}: "${item.slice(0, 12)}…" is not id:base64`);
    const id = item.slice(0, at);
    if (keys.has(id)) throw new PayloadKeyError(`${source}: key ID "${id}" appears twice`);
    keys.set(id, keyBytes(id, item.slice(at + 1), source));
    current ??= id;
  }
  if (!current) throw new PayloadKeyError(`${source} is empty: give at least one id:base64 key`);
  return { current, keys, source };
}

interface KeyFile {
  current: string;
  keys: Record<string, string>;
}

/** Reads a key file (`{ "current": id, "keys": { id: base64 } }`). */
export function readKeyFile(file: string): PayloadKeys {
  let parsed: KeyFile;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8')) as KeyFile;
  } catch (err) {
    throw new PayloadKeyError(`key file ${file} cannot be read: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || typeof parsed.keys !== 'object' || parsed.keys === null)
    throw new PayloadKeyError(`key file ${file}: "keys" must be an object of id → base64`);
  const keys = new Map<string, Buffer>();
  for (const [id, b64] of Object.entries(parsed.keys)) {
    if (typeof b64 !== 'string') throw new PayloadKeyError(`key file ${file}: keys.${id} must be a base64 string`);
    keys.set(id, keyBytes(id, b64, `key file ${file}`));
  }
  if (typeof parsed.current !== 'string' || !keys.has(parsed.current))
    throw new PayloadKeyError(`key file ${file}: "current" must name one of its keys (${[...keys.keys()].join(', ')})`);
  return { current: parsed.current, keys, source: file };
}

function writeKeyFile(file: string, keys: KeyFile): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(keys, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/** A new key ID: the date and a few random characters (sortable, unique enough for a key file). */
function newKeyId(now = new Date()): string {
  return `k${now.toISOString().slice(0, 10).replace(/-/g, '')}-${randomBytes(3).toString('hex')}`;
}

/** Creates the key file with one new key if it does not exist; returns whether it did. */
export function ensureKeyFile(file = DEFAULT_KEY_FILE): boolean {
  if (existsSync(file)) {
    readKeyFile(file); // a broken file is refused now, not at the first payload
    const mode = statSync(file).mode & 0o777;
    if (mode & 0o077) chmodSync(file, 0o600);
    return false;
  }
  const id = newKeyId();
  writeKeyFile(file, { current: id, keys: { [id]: randomBytes(32).toString('base64') } });
  return true;
}

/** Adds a new key to the key file and makes it current; the old keys stay, for the payloads they sealed. */
export function rotateKeyFile(file = DEFAULT_KEY_FILE): { current: string; previous: string; count: number } {
  const before = readKeyFile(file);
  let id = newKeyId();
  while (before.keys.has(id)) id = newKeyId();
  const keys: Record<string, string> = {};
  for (const [k, v] of before.keys) keys[k] = v.toString('base64');
  keys[id] = randomBytes(32).toString('base64');
  writeKeyFile(file, { current: id, keys });
  return { current: id, previous: before.current, count: Object.keys(keys).length };
}

/**
 * The keys this process uses: PAYLOAD_KEYS, else PAYLOAD_KEY_FILE, else the default key file if it
 * exists. Undefined when there are none (the caller says what to do).
 */
export function loadPayloadKeys(env: NodeJS.ProcessEnv = process.env): PayloadKeys | undefined {
  if (env.PAYLOAD_KEYS?.trim()) return parseKeyList(env.PAYLOAD_KEYS);
  const file = env.PAYLOAD_KEY_FILE ? path.resolve(env.PAYLOAD_KEY_FILE) : DEFAULT_KEY_FILE;
  if (env.PAYLOAD_KEY_FILE && !existsSync(file))
    throw new PayloadKeyError(`PAYLOAD_KEY_FILE names ${file}, which does not exist`);
  return existsSync(file) ? readKeyFile(file) : undefined;
}

/** Like loadPayloadKeys, but a process that must encrypt refuses to go on without keys. */
export function requirePayloadKeys(env: NodeJS.ProcessEnv = process.env): PayloadKeys {
  const keys = loadPayloadKeys(env);
  if (!keys)
    throw new PayloadKeyError(
      `no payload encryption key: set PAYLOAD_KEYS (id:base64 of 32 bytes) or PAYLOAD_KEY_FILE, or run npm start once (it creates ${path.relative(process.cwd(), DEFAULT_KEY_FILE) || DEFAULT_KEY_FILE})`,
    );
  return keys;
}

/** AES-256-GCM over the serialized payload (compressed first when that makes it smaller). */
export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly keys: PayloadKeys) {}

  get currentKeyId(): string {
    return this.keys.current;
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => this.seal(p));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => this.open(p));
  }

  seal(payload: Payload): Payload {
    const id = this.keys.current;
    const key = this.keys.keys.get(id)!;
    const plain = Buffer.from(temporal.api.common.v1.Payload.encode(payload).finish());
    const packed = plain.length >= COMPRESS_FROM ? deflateRawSync(plain) : undefined;
    const body = packed && packed.length < plain.length ? packed : plain;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    cipher.setAAD(Buffer.from(id));
    const sealed = Buffer.concat([iv, cipher.update(body), cipher.final(), cipher.getAuthTag()]);
    return {
      metadata: {
        encoding: Buffer.from(ENCRYPTED_ENCODING),
        [KEY_ID]: Buffer.from(id),
        ...(body === packed ? { [COMPRESSION]: Buffer.from('deflate') } : {}),
      },
      data: sealed,
    };
  }

  open(payload: Payload): Payload {
    const encoding = payload.metadata?.encoding ? Buffer.from(payload.metadata.encoding).toString() : undefined;
    if (encoding !== ENCRYPTED_ENCODING) return payload; // written in the clear: as it is
    const idBytes = payload.metadata?.[KEY_ID];
    const id = idBytes ? Buffer.from(idBytes).toString() : '';
    const key = this.keys.keys.get(id);
    if (!key)
      throw new PayloadKeyError(
        `payload encrypted with key ID "${id}", which is not among the keys of ${this.keys.source} (${[...this.keys.keys.keys()].join(', ')})`,
      );
    const data = Buffer.from(payload.data ?? []);
    if (data.length < IV_BYTES + TAG_BYTES)
      throw new PayloadKeyError(`payload sealed with key ID "${id}" is truncated`);
    const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
    decipher.setAAD(Buffer.from(id));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    let body: Buffer;
    try {
      body = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new PayloadKeyError(
        `payload sealed with key ID "${id}" does not open with that key (altered, or another key of the same ID)`,
      );
    }
    const compressed =
      payload.metadata?.[COMPRESSION] && Buffer.from(payload.metadata[COMPRESSION]).toString() === 'deflate';
    const decoded = temporal.api.common.v1.Payload.decode(compressed ? inflateRawSync(body) : body);
    return { metadata: decoded.metadata ?? {}, data: decoded.data ?? new Uint8Array() };
  }
}

/**
 * The failure converter that moves failure messages and stack traces into an encoded payload (so the
 * codec encrypts them); the module the SDK loads by path, in the worker and inside the workflow sandbox.
 */
export const FAILURE_CONVERTER_PATH = existsSync(path.join(__dirname, 'failure-converter.ts'))
  ? path.join(__dirname, 'failure-converter.ts') // the sources (tsx, vitest: plain require knows no .ts)
  : require.resolve('./failure-converter');

/** The data converter of every client and worker of the project: the codec, and encoded failure messages. */
export function dataConverterFor(keys: PayloadKeys): DataConverter {
  return { payloadCodecs: [new EncryptionCodec(keys)], failureConverterPath: FAILURE_CONVERTER_PATH };
}

/** A payload from a raw history, through the codecs, then to its value (undefined when it cannot be read). */
export async function decodeHistoryPayload(dc: LoadedDataConverter, p: Payload | null | undefined): Promise<unknown> {
  if (!p) return undefined;
  let payload: Payload = p;
  for (const codec of [...dc.payloadCodecs].reverse()) payload = (await codec.decode([payload]))[0] ?? payload;
  return dc.payloadConverter.fromPayload(payload);
}
