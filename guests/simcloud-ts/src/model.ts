/**
 * The simulator's wire format, as the Rust simcloud's `model.rs`: the instances, load
 * balancers and routes its REST API returns, checked on the way in (the cloud's answers are
 * untrusted, so a missing or mistyped field is a `decode` error naming it), and the request
 * bodies this provider sends, with exactly the simulator's fields in the Rust simcloud's
 * order (so both send the same bytes).
 */

import { HttpError } from '@wasm-ccm/provider-sdk';
import type { Protocol } from '@wasm-ccm/provider-sdk';

/** Lifecycle state; any other state (say `pending`) means the instance exists. */
export type InstanceStatus = 'running' | 'stopped' | 'deleted' | 'other';

/** A virtual machine. */
export interface Instance {
  id: string;
  name: string;
  instance_type: string;
  zone: string;
  region: string;
  status: InstanceStatus;
  private_ip: string;
  public_ip: string | null;
  public_ipv6: string | null;
  hostname: string;
}

/** Provisioning state of a load balancer. */
export type LbState = 'provisioning' | 'active';

/** A front-end port forwarded to `node_port` on every target. */
export interface Listener {
  port: number;
  protocol: Protocol;
  node_port: number;
}

/** A network load balancer. */
export interface LoadBalancer {
  id: string;
  name: string;
  status: LbState;
  ip: string | null;
  hostname: string | null;
  proxy_protocol: boolean;
  listeners: Listener[];
  targets: string[];
  source_ranges: string[];
}

/** What a load balancer should look like; also the body of `PUT /v1/load-balancers/{id}`. */
export interface LbSpec {
  listeners: Listener[];
  targets: string[];
  source_ranges: string[];
  proxy_protocol: boolean;
}

/** Body of `POST /v1/load-balancers`: the name, cluster and Service UID, then the spec. */
export type NewLoadBalancer = { name: string; cluster: string; service_uid: string } & LbSpec;

/** A VPC route sending `destination_cidr` to an instance. */
export interface Route {
  id: string;
  name: string;
  destination_cidr: string;
  target_instance: string;
  blackhole: boolean;
}

/** Body of `POST /v1/routes`. */
export interface NewRoute {
  name: string;
  cluster: string;
  destination_cidr: string;
  target_instance: string;
}

/** `value` as an instance, or a `decode` error from `url` naming the field that is wrong. */
export function instanceFrom(value: unknown, url: string): Instance {
  const fields = Fields.of(value, url, 'instance');
  const status = fields.text('status');
  return {
    id: fields.text('id'),
    name: fields.text('name'),
    instance_type: fields.text('instance_type'),
    zone: fields.text('zone'),
    region: fields.text('region'),
    status: status === 'running' || status === 'stopped' || status === 'deleted' ? status : 'other',
    private_ip: fields.text('private_ip'),
    public_ip: fields.optionalText('public_ip'),
    public_ipv6: fields.optionalText('public_ipv6'),
    hostname: fields.optionalText('hostname') ?? '',
  };
}

/** The `instances` of a `GET /v1/instances` response. */
export function instanceListFrom(value: unknown, url: string): Instance[] {
  return Fields.of(value, url, 'instance list').list('instances', (item) =>
    instanceFrom(item, url),
  );
}

/**
 * `value` as a load balancer, or a `decode` error from `url` naming the field that is wrong.
 * As the Rust simcloud: `ip` and `hostname` may be absent or null, `proxy_protocol` and the
 * lists may be absent (false, empty), a status other than `provisioning` or `active` is wrong.
 */
export function loadBalancerFrom(value: unknown, url: string): LoadBalancer {
  const fields = Fields.of(value, url, 'load balancer');
  const status = fields.text('status');
  if (status !== 'provisioning' && status !== 'active') {
    throw fields.wrong('status', `must be "provisioning" or "active", got ${JSON.stringify(status)}`);
  }
  return {
    id: fields.text('id'),
    name: fields.text('name'),
    status,
    ip: fields.optionalText('ip'),
    hostname: fields.optionalText('hostname'),
    proxy_protocol: fields.flag('proxy_protocol'),
    listeners: fields.optionalList('listeners', (item, index) => listenerFrom(item, url, index)),
    targets: fields.optionalList('targets', (item, index) => fields.item('targets', index, item)),
    source_ranges: fields.optionalList('source_ranges', (item, index) =>
      fields.item('source_ranges', index, item),
    ),
  };
}

/** The `load_balancers` of a `GET /v1/load-balancers` response. */
export function loadBalancerListFrom(value: unknown, url: string): LoadBalancer[] {
  return Fields.of(value, url, 'load balancer list').list('load_balancers', (item) =>
    loadBalancerFrom(item, url),
  );
}

function listenerFrom(value: unknown, url: string, index: number): Listener {
  const fields = Fields.of(value, url, `load balancer listener ${index}`);
  const protocol = fields.text('protocol');
  if (protocol !== 'tcp' && protocol !== 'udp' && protocol !== 'sctp') {
    throw fields.wrong('protocol', `must be "tcp", "udp" or "sctp", got ${JSON.stringify(protocol)}`);
  }
  return { port: fields.int32('port'), protocol, node_port: fields.int32('node_port') };
}

/** `value` as a route, or a `decode` error from `url` naming the field that is wrong. */
export function routeFrom(value: unknown, url: string): Route {
  const fields = Fields.of(value, url, 'route');
  return {
    id: fields.text('id'),
    name: fields.text('name'),
    destination_cidr: fields.text('destination_cidr'),
    target_instance: fields.text('target_instance'),
    blackhole: fields.flag('blackhole'),
  };
}

/** The `routes` of a `GET /v1/routes` response. */
export function routeListFrom(value: unknown, url: string): Route[] {
  return Fields.of(value, url, 'route list').list('routes', (item) => routeFrom(item, url));
}

/** Whether `value` is the simulator's error body with code `not_found`. */
export function isNotFoundBody(value: unknown): boolean {
  if (value === null || typeof value !== 'object') {
    return false;
  }
  const error = (value as Record<string, unknown>)['error'];
  return (
    error !== null &&
    typeof error === 'object' &&
    (error as Record<string, unknown>)['code'] === 'not_found'
  );
}

/** The fields of one JSON object of a response, read by type; a wrong one names itself. */
class Fields {
  private constructor(
    private readonly object: Record<string, unknown>,
    private readonly url: string,
    private readonly what: string,
  ) {}

  /** `value` as the JSON object `what` (say `instance`) of the response from `url`. */
  static of(value: unknown, url: string, what: string): Fields {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw decode(url, `expected a JSON object (${what})`);
    }
    return new Fields(value as Record<string, unknown>, url, what);
  }

  /** The error for `field`, which `problem` (say `must be a string`). */
  wrong(field: string, problem: string): HttpError {
    return decode(this.url, `${this.what} field "${field}" ${problem}`);
  }

  /** A required string. */
  text(field: string): string {
    const v = this.object[field];
    if (typeof v !== 'string') {
      throw this.wrong(field, 'must be a string');
    }
    return v;
  }

  /** A string that may be absent or null (`null` then). */
  optionalText(field: string): string | null {
    const v = this.object[field];
    if (v === undefined || v === null) {
      return null;
    }
    if (typeof v !== 'string') {
      throw this.wrong(field, 'must be a string or null');
    }
    return v;
  }

  /** A boolean that may be absent (`false` then). */
  flag(field: string): boolean {
    const v = this.object[field] ?? false;
    if (typeof v !== 'boolean') {
      throw this.wrong(field, 'must be true or false');
    }
    return v;
  }

  /** A required integer that fits 32 bits, as the Rust simcloud's `i32`. */
  int32(field: string): number {
    const v = this.object[field];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < -(2 ** 31) || v >= 2 ** 31) {
      throw this.wrong(field, 'must be a 32-bit integer');
    }
    return v;
  }

  /** A list that may be absent (empty then), each item read by `read`. */
  optionalList<T>(field: string, read: (item: unknown, index: number) => T): T[] {
    return this.object[field] === undefined ? [] : this.list(field, read);
  }

  /** A required list, each item read by `read`. */
  list<T>(field: string, read: (item: unknown, index: number) => T): T[] {
    const v = this.object[field];
    if (!Array.isArray(v)) {
      throw this.wrong(field, 'must be a list');
    }
    return v.map(read);
  }

  /** Item `index` of the list `field`, which must be a string. */
  item(field: string, index: number, value: unknown): string {
    if (typeof value !== 'string') {
      throw this.wrong(`${field}[${index}]`, 'must be a string');
    }
    return value;
  }
}

function decode(url: string, message: string): HttpError {
  return new HttpError('decode', url, `unexpected response from ${url}: ${message}`);
}
