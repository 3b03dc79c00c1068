/**
 * What the host offers besides `wasi:http`: log lines tagged with the provider's name and
 * version, the cloud configuration, and the key-value cache shared by all calls of one
 * provider version (a fresh instance serves every call, so nothing in memory survives).
 */

import {
  cacheDelete,
  cacheGet,
  cacheSet,
  cloudConfig,
  log as hostLog,
} from 'wasm-ccm:provider/host@0.1.0';
import type { LogLevel } from 'wasm-ccm:provider/host@0.1.0';

import { ProviderError } from './errors.js';

/** Host log lines, by level. The host keeps at most 8 KiB of a line. */
export const log = {
  trace: (message: string): void => hostLog('trace', message),
  debug: (message: string): void => hostLog('debug', message),
  info: (message: string): void => hostLog('info', message),
  warn: (message: string): void => hostLog('warn', message),
  error: (message: string): void => hostLog('error', message),
  at: (level: LogLevel, message: string): void => hostLog(level, message),
};

/** The cloud configuration (`--cloud-config`). It is configuration, not a secret store. */
export const config = {
  /** The raw bytes, if a cloud configuration was given. */
  raw(): Uint8Array | undefined {
    return cloudConfig();
  },

  /**
   * `bytes` (by default this version's configuration) parsed as a JSON object; `{}` when
   * none was given. Anything else fails with `other` naming what is wrong.
   */
  json(bytes: Uint8Array | undefined = cloudConfig()): Record<string, unknown> {
    if (bytes === undefined) {
      return {};
    }
    let value: unknown;
    try {
      value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
    } catch (error) {
      throw ProviderError.other(`invalid cloud config: ${(error as Error).message}`);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw ProviderError.other('invalid cloud config: expected a JSON object');
    }
    return value as Record<string, unknown>;
  },
};

/** The host's cache: values that outlive one call, each with a time to live. */
export const cache = {
  /** The value stored under `key`, if it has not expired. */
  get(key: string): Uint8Array | undefined {
    return cacheGet(key);
  },

  /** Store `value` under `key` for `ttlMs` (the host may cap the TTL or evict early). */
  set(key: string, value: Uint8Array, ttlMs: number): void {
    cacheSet(key, value, BigInt(Math.max(0, Math.floor(ttlMs))));
  },

  /** Forget `key`. */
  delete(key: string): void {
    cacheDelete(key);
  },

  /** The value under `key` decoded from JSON; a value that no longer decodes counts as absent. */
  getJson(key: string): unknown {
    const bytes = cacheGet(key);
    if (bytes === undefined) {
      return undefined;
    }
    try {
      return JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      return undefined;
    }
  },

  /** Store `value` as JSON under `key` for `ttlMs`. */
  setJson(key: string, value: unknown, ttlMs: number): void {
    cache.set(key, new TextEncoder().encode(JSON.stringify(value)), ttlMs);
  },
};
