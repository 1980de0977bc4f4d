/**
 * The payload codec and the codec server, without Temporal: sealing, key rotation, the refusals, the
 * key file, and the codec server's token and CORS rules.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { afterAll, describe, expect, it } from 'vitest';
import { startCodecServer } from '../ops/codec-server';
import {
  COMPRESS_FROM,
  ENCRYPTED_ENCODING,
  EncryptionCodec,
  ensureKeyFile,
  loadPayloadKeys,
  parseKeyList,
  readKeyFile,
  rotateKeyFile,
} from '../platform/payload-codec';

const key = () => randomBytes(32).toString('base64');
const order = {
  orderId: 'o-1',
  paymentMethod: 'tok_visa',
  items: Array.from({ length: 20 }, (_, i) => ({ sku: `SKU-${i}`, qty: 1, unitPriceCents: 1234 })),
};
const text = (p: Payload): string => Buffer.from(p.data ?? []).toString('latin1');
const meta = (p: Payload, k: string): string | undefined =>
  p.metadata?.[k] ? Buffer.from(p.metadata[k]).toString() : undefined;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-keys-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('the payload codec', () => {
  it('seals a payload (no plaintext left, key ID recorded, compressed when larger) and opens it again', async () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${key()}`));
    const plain = defaultPayloadConverter.toPayload(order);
    const [sealed] = await codec.encode([plain]);
    expect(meta(sealed!, 'encoding')).toBe(ENCRYPTED_ENCODING);
    expect(meta(sealed!, 'encryption-key-id')).toBe('k1');
    expect(meta(sealed!, 'compression')).toBe('deflate');
    expect(text(sealed!)).not.toContain('tok_visa');
    expect(sealed!.data!.length).toBeLessThan(plain.data!.length); // 20 similar lines compress
    const [opened] = await codec.decode([sealed!]);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual(order);
    // Two seals of one payload differ (a fresh IV each time).
    const [again] = await codec.encode([plain]);
    expect(Buffer.from(again!.data!).equals(Buffer.from(sealed!.data!))).toBe(false);
  });

  it('leaves a payload under COMPRESS_FROM bytes uncompressed, and opens it', async () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${key()}`));
    const small = { ...order, items: order.items.slice(0, 2) };
    const plain = defaultPayloadConverter.toPayload(small);
    expect(temporal.api.common.v1.Payload.encode(plain).finish().length).toBeLessThan(COMPRESS_FROM); // what the codec measures
    const [sealed] = await codec.encode([plain]);
    expect(meta(sealed!, 'compression')).toBeUndefined();
    expect(text(sealed!)).not.toContain('tok_visa');
    const [opened] = await codec.decode([sealed!]);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual(small);
  });

  it('passes a payload in the clear through, both ways of a client without the key', async () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${key()}`));
    const plain = defaultPayloadConverter.toPayload({ orderId: 'from-the-cli' });
    expect(await codec.decode([plain])).toEqual([plain]);
  });

  it('rotates: new payloads use the current key, old ones still open; an unknown key ID is named', async () => {
    const k1 = key();
    const before = new EncryptionCodec(parseKeyList(`k1:${k1}`));
    const [old] = await before.encode([defaultPayloadConverter.toPayload('sealed before')]);
    const after = new EncryptionCodec(parseKeyList(`k2:${key()},k1:${k1}`));
    const [fresh] = await after.encode([defaultPayloadConverter.toPayload('sealed after')]);
    expect(meta(fresh!, 'encryption-key-id')).toBe('k2');
    expect(defaultPayloadConverter.fromPayload((await after.decode([old!]))[0]!)).toBe('sealed before');
    await expect(before.decode([fresh!])).rejects.toThrow(/key ID "k2", which is not among the keys/);
  });

  it('refuses a tampered payload, and a key ID swapped onto another payload', async () => {
    const k = parseKeyList(`a:${key()},b:${key()}`);
    const codec = new EncryptionCodec(k);
    const [sealed] = await codec.encode([defaultPayloadConverter.toPayload('x')]);
    const flipped = Buffer.from(sealed!.data!);
    flipped[flipped.length - 20]! ^= 1;
    await expect(codec.decode([{ ...sealed!, data: flipped }])).rejects.toThrow(/does not open/);
    const swapped = { ...sealed!, metadata: { ...sealed!.metadata, 'encryption-key-id': Buffer.from('b') } };
    await expect(codec.decode([swapped])).rejects.toThrow(/key ID "b" does not open/);
  });

  it('names the field of a bad key list or key file', () => {
    expect(() => parseKeyList('')).toThrow(/PAYLOAD_KEYS is empty/);
    expect(() => parseKeyList('nokey')).toThrow(/is not id:base64/);
    expect(() => parseKeyList('k1:c2hvcnQ=')).toThrow(/key "k1" must be 32 bytes/);
    expect(() => parseKeyList(`k1:${key()},k1:${key()}`)).toThrow(/"k1" appears twice/);
    const bad = path.join(tmp, 'bad.json');
    writeFileSync(bad, JSON.stringify({ current: 'zz', keys: { k1: key() } }));
    expect(() => readKeyFile(bad)).toThrow(/"current" must name one of its keys/);
    expect(() => loadPayloadKeys({ PAYLOAD_KEY_FILE: path.join(tmp, 'missing.json') })).toThrow(/does not exist/);
  });

  it('creates the key file once, mode 0600; rotation keeps the old keys', () => {
    const file = path.join(tmp, 'keys.json');
    expect(ensureKeyFile(file)).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const first = readKeyFile(file);
    expect(ensureKeyFile(file)).toBe(false);
    expect(readKeyFile(file).current).toBe(first.current);
    const r = rotateKeyFile(file);
    expect(r.previous).toBe(first.current);
    const after = readKeyFile(file);
    expect(after.current).toBe(r.current);
    expect([...after.keys.keys()].sort()).toEqual([first.current, r.current].sort());
    expect(after.keys.get(first.current)!.equals(first.keys.get(first.current)!)).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, 'utf8')).not.toContain('undefined');
  });
});

describe('the codec server', () => {
  it('answers /decode and /encode with the token only, and CORS for the Web UI origin only', async () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${key()}`));
    const token = randomBytes(18).toString('base64url');
    const ui = 'http://127.0.0.1:8233';
    const server = await startCodecServer({ codec, token, allowOrigins: [ui] });
    try {
      const [sealed] = await codec.encode([defaultPayloadConverter.toPayload({ paymentMethod: 'tok_visa' })]);
      const body = JSON.stringify({
        payloads: [
          {
            metadata: Object.fromEntries(
              Object.entries(sealed!.metadata!).map(([k, v]) => [k, Buffer.from(v).toString('base64')]),
            ),
            data: Buffer.from(sealed!.data!).toString('base64'),
          },
        ],
      });
      const post = (url: string, headers: Record<string, string> = {}) =>
        fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
      // No token, a wrong token: 401.
      expect((await post(`${server.url}/decode`)).status).toBe(401);
      expect((await post(`${server.url}/decode`, { authorization: 'Bearer wrong-token-wrong-token' })).status).toBe(
        401,
      );
      expect((await post(`${server.url}/wrong-token-wrong-token/decode`)).status).toBe(401);
      // The bearer header (the CLI), and the token in the path (the Web UI's endpoint).
      for (const res of [
        await post(`${server.url}/decode`, { authorization: `Bearer ${token}` }),
        await post(`${server.uiEndpoint}/decode`, { origin: ui }),
      ]) {
        expect(res.status).toBe(200);
        const out = (await res.json()) as { payloads: { data: string }[] };
        expect(Buffer.from(out.payloads[0]!.data, 'base64').toString()).toContain('tok_visa');
      }
      const fromUi = await post(`${server.uiEndpoint}/decode`, { origin: ui });
      expect(fromUi.headers.get('access-control-allow-origin')).toBe(ui);
      // Another origin: refused, and no CORS header to let its page read anything.
      const other = await post(`${server.uiEndpoint}/decode`, { origin: 'http://evil.example' });
      expect(other.status).toBe(403);
      expect(other.headers.get('access-control-allow-origin')).toBeNull();
      // The preflight of the Web UI.
      const pre = await fetch(`${server.uiEndpoint}/decode`, {
        method: 'OPTIONS',
        headers: { origin: ui, 'access-control-request-method': 'POST' },
      });
      expect(pre.status).toBe(204);
      expect(pre.headers.get('access-control-allow-headers')).toMatch(/x-namespace/);
      // Encode, then a body that is not the protocol's: 400 naming the field.
      const enc = await post(`${server.url}/encode`, { authorization: `Bearer ${token}` });
      expect(enc.status).toBe(200);
      const bad = await fetch(`${server.url}/decode`, {
        method: 'POST',
        body: JSON.stringify({ payloads: 'x' }),
        headers: { authorization: `Bearer ${token}` },
      });
      expect(bad.status).toBe(400);
      // Protobuf JSON leaves an empty list out: {} is no payloads, not an error (the Temporal CLI sends it).
      const empty = await fetch(`${server.url}/decode`, {
        method: 'POST',
        body: '{}',
        headers: { authorization: `Bearer ${token}` },
      });
      expect(empty.status).toBe(200);
      expect(await empty.json()).toEqual({ payloads: [] });
      expect(((await bad.json()) as { message: string }).message).toMatch(/"payloads" must be an array/);
      // A payload sealed with a key it does not have: 422 naming the key ID.
      const stranger = new EncryptionCodec(parseKeyList(`k9:${key()}`));
      const [foreign] = await stranger.encode([defaultPayloadConverter.toPayload('x')]);
      const unknown = await fetch(`${server.url}/decode`, {
        method: 'POST',
        body: JSON.stringify({
          payloads: [
            {
              metadata: Object.fromEntries(
                Object.entries(foreign!.metadata!).map(([k, v]) => [k, Buffer.from(v).toString('base64')]),
              ),
              data: Buffer.from(foreign!.data!).toString('base64'),
            },
          ],
        }),
        headers: { authorization: `Bearer ${token}` },
      });
      expect(unknown.status).toBe(422);
      expect(((await unknown.json()) as { message: string }).message).toMatch(/key ID "k9"/);
    } finally {
      await server.close();
    }
  });
});
