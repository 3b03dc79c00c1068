/**
 * The contract's `provider-error` as a JavaScript exception: what a provider throws, and what
 * the exports turn into the `err` side of a call's result.
 *
 * componentize-js sends a thrown value's own `payload` property to the host as the error;
 * any other exception would trap the call, so the exports (see `provider.ts`) turn every
 * other exception into `other` with its message.
 */

import type { ProviderError as Variant } from 'wasm-ccm:provider/types@0.1.0';

/** A failed provider call, carrying the contract's error variant as `payload`. */
export class ProviderError extends Error {
  readonly payload: Variant;

  constructor(payload: Variant) {
    super(describe(payload));
    this.name = 'ProviderError';
    // componentize-js looks for an own property named `payload`.
    this.payload = payload;
  }

  /** The thing asked about definitely does not exist in the cloud. */
  static notFound(message: string): ProviderError {
    return new ProviderError({ tag: 'not-found', val: message });
  }

  /** The provider does not implement this function. */
  static notImplemented(): ProviderError {
    return new ProviderError({ tag: 'not-implemented' });
  }

  /** Another controller owns this load balancer. */
  static implementedElsewhere(): ProviderError {
    return new ProviderError({ tag: 'implemented-elsewhere' });
  }

  /** Not done yet: the host calls again after `delayMs` instead of backing off. */
  static retryAfter(delayMs: number, message: string): ProviderError {
    const delay = Number.isFinite(delayMs) && delayMs > 0 ? Math.ceil(delayMs) : 0;
    return new ProviderError({ tag: 'retry-after', val: { delayMs: BigInt(delay), message } });
  }

  /** Anything else that went wrong. */
  static other(message: string): ProviderError {
    return new ProviderError({ tag: 'other', val: message });
  }
}

/** `error` as a provider error: itself, a throttled HTTP error as `retry-after`, else `other`. */
export function toProviderError(error: unknown): ProviderError {
  if (error instanceof ProviderError) {
    return error;
  }
  if (error instanceof Error) {
    const retryAfterMs = (error as { retryAfterMs?: unknown }).retryAfterMs;
    if (typeof retryAfterMs === 'number') {
      return ProviderError.retryAfter(retryAfterMs, error.message);
    }
    return ProviderError.other(error.message);
  }
  return ProviderError.other(`provider threw a non-error value: ${String(error)}`);
}

function describe(payload: Variant): string {
  switch (payload.tag) {
    case 'not-found':
      return `not found: ${payload.val}`;
    case 'not-implemented':
      return 'not implemented';
    case 'implemented-elsewhere':
      return 'implemented elsewhere';
    case 'retry-after':
      return `retry after ${payload.val.delayMs} ms: ${payload.val.message}`;
    case 'other':
      return payload.val;
  }
}
