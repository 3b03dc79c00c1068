/**
 * The simulator's instances as its REST API returns them, checked on the way in: the cloud's
 * answers are untrusted, so a missing or mistyped field is an error naming it.
 */

import { HttpError } from '@wasm-ccm/provider-sdk';

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

/** `value` as an instance, or a `decode` error from `url` naming the field that is wrong. */
export function instanceFrom(value: unknown, url: string): Instance {
  const object = record(value, url, 'instance');
  const text = (field: string): string => {
    const v = object[field];
    if (typeof v !== 'string') {
      throw decode(url, `instance field "${field}" must be a string`);
    }
    return v;
  };
  const optional = (field: string): string | null => {
    const v = object[field];
    if (v === undefined || v === null) {
      return null;
    }
    if (typeof v !== 'string') {
      throw decode(url, `instance field "${field}" must be a string or null`);
    }
    return v;
  };
  const status = text('status');
  return {
    id: text('id'),
    name: text('name'),
    instance_type: text('instance_type'),
    zone: text('zone'),
    region: text('region'),
    status: status === 'running' || status === 'stopped' || status === 'deleted' ? status : 'other',
    private_ip: text('private_ip'),
    public_ip: optional('public_ip'),
    public_ipv6: optional('public_ipv6'),
    hostname: optional('hostname') ?? '',
  };
}

/** The `instances` of a `GET /v1/instances` response. */
export function instanceListFrom(value: unknown, url: string): Instance[] {
  const instances = record(value, url, 'instance list')['instances'];
  if (!Array.isArray(instances)) {
    throw decode(url, '"instances" must be a list');
  }
  return instances.map((instance) => instanceFrom(instance, url));
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

function record(value: unknown, url: string, what: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw decode(url, `expected a JSON object (${what})`);
  }
  return value as Record<string, unknown>;
}

function decode(url: string, message: string): HttpError {
  return new HttpError('decode', url, `unexpected response from ${url}: ${message}`);
}
