/**
 * The payload key of the tests: derived from a public phrase, so it is no secret and the replay
 * fixtures (sealed with it) decode on every machine. Never used outside the tests.
 */
import { createHash } from 'node:crypto';

export const TEST_PAYLOAD_KEY_ID = 'test-1';
export const TEST_PAYLOAD_KEYS = `${TEST_PAYLOAD_KEY_ID}:${createHash('sha256').update('order-saga test payload key 1').digest('base64')}`;
