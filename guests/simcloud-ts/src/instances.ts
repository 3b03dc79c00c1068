/**
 * `InstancesV2`, as the Rust simcloud's `instances.rs`: find the instance behind a node (by
 * provider ID, else by name) and describe it. Owns provider IDs (`simcloud://<instance-id>`)
 * and the instance cache: lookups by id are cached for 5 s under `instance/<id>`; absence is
 * never cached. `instance-exists` and `instance-shutdown` always read fresh (refreshing the
 * cache); metadata may use the cache. Load balancers and routes find instances with
 * `instanceIdOf` and `byName`.
 */

import { ProviderError, cache } from '@wasm-ccm/provider-sdk';
import type { InstanceMetadata, Instances, Node, NodeAddress } from '@wasm-ccm/provider-sdk';

import { Api } from './api.js';
import type { Instance } from './model.js';
import { instanceFrom } from './model.js';

/** The scheme of this provider's IDs. */
const SCHEME = 'simcloud://';
/** How long an instance read by id is served from the host cache. */
const CACHE_TTL_MS = 5000;
/** Extra node label carrying the instance id. */
const INSTANCE_ID_LABEL = 'simcloud.example/instance-id';

/** Whether a lookup may be answered from the host cache. */
type Freshness = 'cached' | 'fresh';

export const simcloudInstances: Instances = {
  async instanceExists(node) {
    return (await find(node, 'fresh')) !== undefined;
  },

  async instanceShutdown(node) {
    return (await require(node, 'fresh')).status === 'stopped';
  },

  async instanceMetadata(node) {
    return metadata(await require(node, 'cached'));
  },
};

/** The instance id inside a simcloud provider ID, or `undefined` for another scheme or no id. */
export function instanceIdOf(providerId: string): string | undefined {
  if (!providerId.startsWith(SCHEME)) {
    return undefined;
  }
  const id = providerId.slice(SCHEME.length).replace(/^\/+/, '');
  return id === '' ? undefined : id;
}

/** The instance behind `node`; `undefined` only on definite absence. */
async function find(node: Node, freshness: Freshness): Promise<Instance | undefined> {
  const api = Api.load();
  const providerId = node.providerId;
  if (providerId === undefined || providerId === '') {
    return byName(api, node.name);
  }
  const id = instanceIdOf(providerId);
  if (id === undefined) {
    throw ProviderError.other(
      `node ${node.name} has provider ID ${JSON.stringify(providerId)}, not a simcloud:// one`,
    );
  }
  return byId(api, id, freshness);
}

/** The instance behind `node`; absence is a `not-found` error. */
async function require(node: Node, freshness: Freshness): Promise<Instance> {
  const instance = await find(node, freshness);
  if (instance === undefined) {
    throw ProviderError.notFound(
      `no simcloud instance for node ${node.name} (${node.providerId ?? 'no provider ID'})`,
    );
  }
  return instance;
}

/** The live instance `id`; `undefined` if unknown or deleted. */
async function byId(api: Api, id: string, freshness: Freshness): Promise<Instance | undefined> {
  if (freshness === 'cached') {
    const cached = cache.getJson(cacheKey(id));
    if (cached !== undefined) {
      try {
        return instanceFrom(cached, `cache ${cacheKey(id)}`);
      } catch {
        // A value that no longer decodes counts as absent: read it fresh.
      }
    }
  }
  const found = await api.instance(id);
  const instance = found?.status === 'deleted' ? undefined : found;
  if (instance === undefined) {
    cache.delete(cacheKey(id));
  } else {
    remember(instance);
  }
  return instance;
}

/** The live instance named `name`; `undefined` if there is none. */
export async function byName(api: Api, name: string): Promise<Instance | undefined> {
  const live = (await api.instances(name)).filter(
    (instance) => instance.name === name && instance.status !== 'deleted',
  );
  if (live.length > 1) {
    throw ProviderError.other(`${live.length} live instances are named ${name}`);
  }
  const instance = live[0];
  if (instance !== undefined) {
    remember(instance);
  }
  return instance;
}

function remember(instance: Instance): void {
  cache.setJson(cacheKey(instance.id), instance, CACHE_TTL_MS);
}

function cacheKey(id: string): string {
  return `instance/${id}`;
}

function metadata(instance: Instance): InstanceMetadata {
  return {
    providerId: `${SCHEME}${instance.id}`,
    instanceType: instance.instance_type,
    nodeAddresses: addresses(instance),
    zone: instance.zone,
    region: instance.region,
    additionalLabels: [[INSTANCE_ID_LABEL, instance.id]],
  };
}

/** `InternalIP`, `ExternalIP` (v4 then v6) and `Hostname`, skipping empty values. */
function addresses(instance: Instance): NodeAddress[] {
  const candidates: [NodeAddress['kind'], string | null][] = [
    ['internal-ip', instance.private_ip],
    ['external-ip', instance.public_ip],
    ['external-ip', instance.public_ipv6],
    ['hostname', instance.hostname],
  ];
  return candidates
    .filter((candidate): candidate is [NodeAddress['kind'], string] => !!candidate[1])
    .map(([kind, address]) => ({ kind, address }));
}
