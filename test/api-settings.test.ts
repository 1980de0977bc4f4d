/**
 * The orders API's settings and its rate limit, without a server: each unusable setting refused
 * naming its variable; the per-key bucket refilled evenly, its Retry-After in whole seconds.
 */
import { describe, expect, it } from 'vitest';
import { RateLimiter } from '../api/rate-limit';
import { readApiSettings } from '../ops/config';

describe('readApiSettings', () => {
  it('has loopback defaults and no CORS origin', () => {
    expect(readApiSettings({})).toEqual({
      port: 8080,
      host: '127.0.0.1',
      ratePerMinute: 600,
      corsOrigins: [],
      answerTimeoutMs: 30_000,
    });
  });

  it('reads each variable, and refuses an unusable one naming it', () => {
    expect(
      readApiSettings({
        API_PORT: '0',
        API_HOST: '0.0.0.0',
        API_RATE_LIMIT: '5',
        API_CORS_ORIGINS: 'https://shop.example, http://127.0.0.1:3000',
        API_ANSWER_TIMEOUT_MS: '1000',
      }),
    ).toEqual({
      port: 0,
      host: '0.0.0.0',
      ratePerMinute: 5,
      corsOrigins: ['https://shop.example', 'http://127.0.0.1:3000'],
      answerTimeoutMs: 1000,
    });
    const withConfig = readApiSettings({ API_SAGA_CONFIG: '{"deadlineMs":120000,"inquiryBaseMs":1000}' });
    // Only the knobs given: the saga fills in its own defaults, those of the build that runs it.
    expect(withConfig.sagaConfig).toEqual({ deadlineMs: 120_000, inquiryBaseMs: 1000 });
    expect(() => readApiSettings({ API_SAGA_CONFIG: '{"deadlineMs":-1}' })).toThrow(/API_SAGA_CONFIG: .*deadlineMs/);
    for (const [name, value] of [
      ['API_PORT', '65536'],
      ['API_PORT', 'http'],
      ['API_RATE_LIMIT', '0'],
      ['API_RATE_LIMIT', '1.5'],
      ['API_ANSWER_TIMEOUT_MS', '10'],
      ['API_CORS_ORIGINS', 'https://shop.example/path'],
      ['API_CORS_ORIGINS', '*'],
      ['API_SAGA_CONFIG', 'deadlineMs=1'],
      ['API_SAGA_CONFIG', '{"deadlineMs":-1}'],
      ['API_SAGA_CONFIG', '{"noSuchKnob":1}'],
    ] as const) {
      expect(() => readApiSettings({ [name]: value }), `${name}=${value}`).toThrow(name);
    }
  });
});

describe('RateLimiter', () => {
  it('allows a full bucket, then answers the seconds until one request is allowed, per key', () => {
    let now = 1_000_000;
    const limiter = new RateLimiter(2, () => now);
    expect([limiter.take('a'), limiter.take('a')]).toEqual([0, 0]);
    expect(limiter.take('a')).toBe(30); // 2 a minute: one every 30 s
    expect(limiter.take('b')).toBe(0);
    now += 29_000;
    expect(limiter.take('a')).toBe(1);
    now += 1_000;
    expect(limiter.take('a')).toBe(0);
    now += 3_600_000; // refilled up to the bucket's size, no more
    expect([limiter.take('a'), limiter.take('a'), limiter.take('a')]).toEqual([0, 0, 30]);
  });
});
