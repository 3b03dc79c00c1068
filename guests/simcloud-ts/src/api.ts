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
import type { Instance, LbSpec, LoadBalancer, NewLoadBalancer, NewRoute, Route } from './model.js';
import {
  instanceFrom,
  instanceListFrom,
  isNotFoundBody,
  loadBalancerFrom,
  loadBalancerListFrom,
  routeFrom,
  routeListFrom,
} from './model.js';

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

  /** The load balancer named `name` in `cluster`, if any. */
  async loadBalancerNamed(name: string, cluster: string): Promise<LoadBalancer | undefined> {
    const path = `load-balancers?name=${encode(name)}&cluster=${encode(cluster)}`;
    const response = await http.get(this.url(path));
    return loadBalancerListFrom(response.json(), response.url).find((lb) => lb.name === name);
  }

  /** `POST /v1/load-balancers`: the new load balancer, still provisioning. */
  async createLoadBalancer(created: NewLoadBalancer): Promise<LoadBalancer> {
    const response = await http.postJson(this.url('load-balancers'), created);
    return loadBalancerFrom(response.json(), response.url);
  }

  /** `PUT /v1/load-balancers/{id}`: replace listeners, targets, source ranges and protocol. */
  async updateLoadBalancer(id: string, spec: LbSpec): Promise<LoadBalancer> {
    const response = await http.putJson(this.url(`load-balancers/${encode(id)}`), spec);
    return loadBalancerFrom(response.json(), response.url);
  }

  /** `PUT /v1/load-balancers/{id}/targets`. */
  async setTargets(id: string, targets: string[]): Promise<LoadBalancer> {
    const url = this.url(`load-balancers/${encode(id)}/targets`);
    const response = await http.putJson(url, { targets });
    return loadBalancerFrom(response.json(), response.url);
  }

  /** `DELETE /v1/load-balancers/{id}`: `true` if deleted now, `false` if already gone. */
  async deleteLoadBalancer(id: string): Promise<boolean> {
    return deleted(await http.del(this.url(`load-balancers/${encode(id)}`)));
  }

  /** `GET /v1/routes?cluster=C`: the routes of `cluster`. */
  async routes(cluster: string): Promise<Route[]> {
    const response = await http.get(this.url(`routes?cluster=${encode(cluster)}`));
    return routeListFrom(response.json(), response.url);
  }

  /** `POST /v1/routes`; a 409 (an `HttpError` with that status) means the cluster already routes the CIDR. */
  async createRoute(created: NewRoute): Promise<Route> {
    const response = await http.postJson(this.url('routes'), created);
    return routeFrom(response.json(), response.url);
  }

  /** `DELETE /v1/routes/{id}`: `true` if deleted now, `false` if already gone. */
  async deleteRoute(id: string): Promise<boolean> {
    return deleted(await http.del(this.url(`routes/${encode(id)}`)));
  }
}

/** `true` for a 2xx answer to a DELETE, `false` for the simulator's "not found". */
function deleted(response: HttpResponse): boolean {
  if (isNotFound(response)) {
    return false;
  }
  response.success();
  return true;
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
