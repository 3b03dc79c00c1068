/**
 * An HTTP client for a provider's cloud, over the runtime's `fetch` (componentize-js
 * implements it with `wasi:http/outgoing-handler`, so every request passes the host's
 * egress gate).
 *
 * The host decides where a request may go and adds credentials to requests bound for
 * granted hosts. A request it refuses (a host not granted, an address inside the cluster)
 * fails with an `HttpError` of kind `transport`: the runtime reports every refusal and
 * connection failure alike (`NetworkError when attempting to fetch resource`), so the
 * message says both are possible. Headers that carry credentials (`authorization`,
 * `proxy-authorization`, `cookie`) are the host's to set: setting one fails with kind
 * `forbidden-header` before anything is sent. A throttled answer (429, or 503 with a
 * `Retry-After` in seconds) carries `retryAfterMs`, which the exports turn into the
 * contract's `retry-after`.
 */

/** Why a request failed. */
export type HttpErrorKind = 'invalid-url' | 'forbidden-header' | 'transport' | 'status' | 'decode';

/** Headers a provider may not set: the host injects credentials. */
const FORBIDDEN_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie']);

/** The delay asked for by a 429 that names none. */
const DEFAULT_THROTTLE_MS = 1000;

/** A failed request; `message` names the URL and what went wrong. */
export class HttpError extends Error {
  readonly kind: HttpErrorKind;
  readonly url: string;
  /** The HTTP status, if the server answered. */
  readonly status: number | undefined;
  /** The delay a throttling server asked for: 429, or 503 with `Retry-After`. */
  readonly retryAfterMs: number | undefined;

  constructor(
    kind: HttpErrorKind,
    url: string,
    message: string,
    status?: number,
    retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'HttpError';
    this.kind = kind;
    this.url = url;
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

/** A received response with its whole body. */
export class HttpResponse {
  constructor(
    /** The URL the request was for. */
    readonly url: string,
    /** The HTTP status code, whatever it is; `success()` turns non-2xx into errors. */
    readonly status: number,
    /** Header names (lowercase) and values. */
    readonly headers: Map<string, string>,
    /** The whole body, as received. */
    readonly body: Uint8Array,
  ) {}

  /** The body decoded as UTF-8 (invalid bytes replaced). */
  text(): string {
    return new TextDecoder().decode(this.body);
  }

  /** Itself if the status is 2xx, else an `HttpError` of kind `status`. */
  success(): HttpResponse {
    if (this.status >= 200 && this.status < 300) {
      return this;
    }
    const retryAfterMs = throttleDelay(this.status, this.headers.get('retry-after'));
    const body = this.text().slice(0, 200);
    throw new HttpError(
      'status',
      this.url,
      `${this.url} answered ${this.status}: ${body}`,
      this.status,
      retryAfterMs,
    );
  }

  /** The body of a 2xx response parsed as JSON. */
  json(): unknown {
    this.success();
    try {
      return JSON.parse(this.text());
    } catch (error) {
      throw new HttpError(
        'decode',
        this.url,
        `unexpected response from ${this.url}: ${(error as Error).message}`,
      );
    }
  }
}

/** What a request carries besides its method and URL. */
export interface RequestOptions {
  /** Header names and values; `accept: application/json` unless one is given here. */
  headers?: Record<string, string>;
  /** The body, sent whole. */
  body?: Uint8Array<ArrayBuffer> | string;
}

/** Send `method url` and read the whole response. Any status is returned as a response. */
export async function send(
  method: string,
  url: string,
  options: RequestOptions = {},
): Promise<HttpResponse> {
  if (!/^https?:\/\/[^/?#]/i.test(url)) {
    throw new HttpError('invalid-url', url, `invalid URL ${JSON.stringify(url)}`);
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (FORBIDDEN_HEADERS.has(name.toLowerCase())) {
      throw new HttpError(
        'forbidden-header',
        url,
        `header ${JSON.stringify(name)} is set by the host, not by providers`,
      );
    }
    headers[name.toLowerCase()] = value;
  }
  headers['accept'] ??= 'application/json';
  let response: Response;
  let body: Uint8Array;
  try {
    response = await fetch(url, { method, headers, body: options.body });
    body = new Uint8Array(await response.arrayBuffer());
  } catch (error) {
    throw new HttpError(
      'transport',
      url,
      `request ${method} ${url} failed: ${(error as Error).message} (the host refused it ` +
        'as egress not granted, or the cloud could not be reached)',
    );
  }
  const responseHeaders = new Map<string, string>();
  response.headers.forEach((value, name) => responseHeaders.set(name.toLowerCase(), value));
  return new HttpResponse(url, response.status, responseHeaders, body);
}

/** `GET url`. */
export function get(url: string): Promise<HttpResponse> {
  return send('GET', url);
}

/** `DELETE url`. */
export function del(url: string): Promise<HttpResponse> {
  return send('DELETE', url);
}

/** `POST url` with `body` as JSON. */
export function postJson(url: string, body: unknown): Promise<HttpResponse> {
  return sendJson('POST', url, body);
}

/** `PUT url` with `body` as JSON. */
export function putJson(url: string, body: unknown): Promise<HttpResponse> {
  return sendJson('PUT', url, body);
}

function sendJson(method: string, url: string, body: unknown): Promise<HttpResponse> {
  return send(method, url, {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/**
 * The delay a throttled answer asks for: 429 (1 s unless `Retry-After` names seconds), or
 * 503 with `Retry-After` in seconds; `undefined` otherwise.
 */
export function throttleDelay(status: number, retryAfter: string | undefined): number | undefined {
  const seconds =
    retryAfter !== undefined && /^\s*\d+\s*$/.test(retryAfter)
      ? Number.parseInt(retryAfter, 10) * 1000
      : undefined;
  if (status === 429) {
    return seconds ?? DEFAULT_THROTTLE_MS;
  }
  if (status === 503) {
    return seconds;
  }
  return undefined;
}
