/**
 * The simulator's REST API as typed calls, the same requests as the Rust simcloud's
 * `api.rs`: URLs, query encoding, and the one judgement about responses only a provider can
 * make: a 404 carrying the simulator's `not_found` error body is definite absence
 * (`undefined`); every other failure is an `HttpError` for the caller to propagate.
 */

import { http } from '@wasm-ccm/provider-sdk';
import type { HttpResponse } from '@wasm-ccm/provider-sdk';

import type { Config } from './config.js';
import { parseConfig } from './config.js';
import type { Instance } from './model.js';
import { instanceFrom, instanceListFrom, isNotFoundBody } from './model.js';

/** A client for one simulator. */
export class Api {
  private readonly base: string;

  constructor(config: Config) {
    this.base = config.apiUrl;
  }

  /** A client for the simulator of this provider version's configuration. */
  static load(): Api {
    return new Api(parseConfig());
  }

  private url(path: string): string {
    return `${this.base}/v1/${path}`;
  }

  /** `GET /v1/instances/{id}`; `undefined` if the id is unknown (deleted instances are returned). */
  async instance(id: string): Promise<Instance | undefined> {
    const response = await http.get(this.url(`instances/${encode(id)}`));
    if (isNotFound(response)) {
      return undefined;
    }
    return instanceFrom(response.json(), response.url);
  }

  /** `GET /v1/instances[?name=NAME]`: the live instances, all or those named `name`. */
  async instances(name?: string): Promise<Instance[]> {
    const query = name === undefined ? '' : `?name=${encode(name)}`;
    const response = await http.get(this.url(`instances${query}`));
    return instanceListFrom(response.json(), response.url);
  }
}

/** A 404 with the simulator's own `not_found` body; a bare 404 (a proxy, a wrong `api_url`) is not proof of absence. */
function isNotFound(response: HttpResponse): boolean {
  if (response.status !== 404) {
    return false;
  }
  try {
    return isNotFoundBody(JSON.parse(response.text()));
  } catch {
    return false;
  }
}

/** Percent-encode `value` for a path segment or query value: all but `A-Za-z0-9-._~`. */
function encode(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}
