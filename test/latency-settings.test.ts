/** The dev server and the real server get the same latency settings (servers/latency.ts, the YAML). */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LATENCY_SETTINGS, latencyDynamicConfig } from '../servers/latency';

/** The YAML's `key:\n  - value: V` entries (the shape the file uses): V as JSON, else as a string. */
function yamlValues(text: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const re = /^([A-Za-z][\w.]*):\s*\n\s+- value:\s*(.+)$/gm;
  const scalar = (v: string): unknown => {
    try {
      return JSON.parse(v) as unknown;
    } catch {
      return v; // `1s`, say
    }
  };
  for (let m = re.exec(text); m; m = re.exec(text)) out[m[1]!] = scalar(m[2]!.trim());
  return out;
}

describe('latency settings', () => {
  const yaml = yamlValues(
    readFileSync(path.join(__dirname, '..', 'temporal', 'dynamicconfig', 'order-saga.yaml'), 'utf8'),
  );

  it('the real server reads every latency setting the dev server gets, with the same value', () => {
    const dev = latencyDynamicConfig();
    expect(Object.keys(dev).length).toBeGreaterThan(0);
    for (const [key, value] of Object.entries(dev)) expect({ key, value: yaml[key] }).toEqual({ key, value });
  });

  it('each setting says why it is there', () => {
    for (const s of LATENCY_SETTINGS) expect(s.reason.length, s.name).toBeGreaterThan(40);
  });
});
