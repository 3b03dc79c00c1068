/**
 * `LoadBalancer`, as the Rust simcloud's `load_balancers.rs`: one simulator load balancer per
 * Service, named with upstream's `DefaultLoadBalancerName` (`"a"` + UID without dashes, ≤ 32
 * characters; the SDK's default `get-load-balancer-name` answers the same) and looked up by
 * that name within the cluster. Owns the mapping from a Service and its nodes to listeners,
 * targets (the nodes `targets.ts` chooses) and source ranges, and from a load balancer to the
 * Service's status.
 *
 * A load balancer still provisioning answers `retry-after` 2 s. Before a write, targets whose
 * instance no longer exists are left out: the ids of the live instances are kept in the host
 * cache for 10 s under `live-instance-ids` and listed again only when a target is not among
 * them, or after a failed write.
 */

import { ProviderError, cache, defaultLoadBalancerName, log } from '@wasm-ccm/provider-sdk';
import type {
  IpMode,
  LbIngress,
  LbStatus,
  LoadBalancer as LoadBalancerFunctions,
  Nodes,
  Service,
  ServicePort,
} from '@wasm-ccm/provider-sdk';

import { Api } from './api.js';
import { parseConfig } from './config.js';
import type { Config } from './config.js';
import type { LbSpec, Listener, LoadBalancer } from './model.js';
import { nodeSelector, targetIds } from './targets.js';

/** How long the host waits before asking again about a provisioning load balancer. */
const PROVISIONING_RETRY_MS = 2000;
/** Host-cache key and lifetime of the ids of live instances. */
const LIVE_IDS = 'live-instance-ids';
const LIVE_IDS_TTL_MS = 10_000;

export const simcloudLoadBalancer: Omit<LoadBalancerFunctions, 'getLoadBalancerName'> = {
  async getLoadBalancer(clusterName, svc) {
    const lb = await Api.load().loadBalancerNamed(defaultLoadBalancerName(svc), clusterName);
    if (lb === undefined) {
      return undefined;
    }
    const point = ingress(lb);
    return { ingress: point === undefined ? [] : [point] };
  },

  async ensureLoadBalancer(clusterName, svc, nodes) {
    const config = parseConfig();
    const api = new Api(config);
    const name = defaultLoadBalancerName(svc);
    const spec = desired(svc, nodes, config);
    let lb = await api.loadBalancerNamed(name, clusterName);
    if (lb === undefined) {
      spec.targets = await live(api, spec.targets);
      lb = await unlessStale(() => create(api, name, clusterName, svc, spec));
    } else if (!matches(spec, lb)) {
      spec.targets = await live(api, spec.targets);
      if (!matches(spec, lb)) {
        const current = lb;
        lb = await unlessStale(() => update(api, current, spec));
      }
    }
    return readyStatus(lb);
  },

  async updateLoadBalancer(clusterName, svc, nodes) {
    const config = parseConfig();
    const wanted = targetIds(nodes, nodeSelector(svc, config));
    const api = new Api(config);
    const lb = await existing(api, clusterName, svc);
    if (sameSet(wanted, lb.targets)) {
      return;
    }
    const targets = await live(api, wanted);
    if (!sameSet(targets, lb.targets)) {
      await unlessStale(() => api.setTargets(lb.id, targets));
      log.info(`load balancer ${lb.name} (${lb.id}) now targets ${JSON.stringify(targets)}`);
    }
  },

  async ensureLoadBalancerDeleted(clusterName, svc) {
    const api = Api.load();
    const name = defaultLoadBalancerName(svc);
    const lb = await api.loadBalancerNamed(name, clusterName);
    if (lb === undefined) {
      return;
    }
    if (await api.deleteLoadBalancer(lb.id)) {
      log.info(`deleted load balancer ${name} (${lb.id}) of service ${svc.namespace}/${svc.name}`);
    }
  },
};

/** The load balancer of `svc`; absence is a `not-found` error. */
async function existing(api: Api, cluster: string, svc: Service): Promise<LoadBalancer> {
  const name = defaultLoadBalancerName(svc);
  const lb = await api.loadBalancerNamed(name, cluster);
  if (lb === undefined) {
    throw ProviderError.notFound(
      `load balancer ${name} of service ${svc.namespace}/${svc.name} does not exist`,
    );
  }
  return lb;
}

async function create(
  api: Api,
  name: string,
  cluster: string,
  svc: Service,
  spec: LbSpec,
): Promise<LoadBalancer> {
  const lb = await api.createLoadBalancer({ name, cluster, service_uid: svc.uid, ...spec });
  log.info(`created load balancer ${name} (${lb.id}) for service ${svc.namespace}/${svc.name}`);
  return lb;
}

async function update(api: Api, lb: LoadBalancer, spec: LbSpec): Promise<LoadBalancer> {
  const updated = await api.updateLoadBalancer(lb.id, spec);
  log.info(`updated load balancer ${lb.name} (${lb.id})`);
  return updated;
}

/** What the load balancer of `svc` should look like for `nodes`, fields in the wire order. */
function desired(svc: Service, nodes: Nodes, config: Config): LbSpec {
  const listeners = svc.ports.map(listener);
  return {
    listeners,
    targets: targetIds(nodes, nodeSelector(svc, config)),
    source_ranges: [...svc.loadBalancerSourceRanges],
    proxy_protocol: config.proxyProtocol,
  };
}

/** The listener of `port`; a port without a node port is an error naming it. */
function listener(port: ServicePort): Listener {
  if (port.nodePort === undefined || port.nodePort === null) {
    throw ProviderError.other(
      `service port ${port.name ?? '(unnamed)'} (${port.port}) has no node port`,
    );
  }
  return { port: port.port, protocol: port.protocol, node_port: port.nodePort };
}

/** Whether `lb` already has the configuration `spec` (order and duplicates aside). */
function matches(spec: LbSpec, lb: LoadBalancer): boolean {
  const key = (l: Listener) => `${l.port}/${l.protocol}/${l.node_port}`;
  return (
    sameSet(spec.listeners.map(key), lb.listeners.map(key)) &&
    sameSet(spec.targets, lb.targets) &&
    sameSet(spec.source_ranges, lb.source_ranges) &&
    spec.proxy_protocol === lb.proxy_protocol
  );
}

/** Whether `a` and `b` hold the same strings, order and duplicates aside. */
function sameSet(a: string[], b: string[]): boolean {
  const left = new Set(a);
  const right = new Set(b);
  return left.size === right.size && [...left].every((item) => right.has(item));
}

/**
 * The `targets` whose instances exist. A Node can outlive its instance until the lifecycle
 * controller deletes it, and one such node must not fail the load balancer of every Service.
 * Asked only before a write; the ids of the live instances come from the host cache unless a
 * target is not among them.
 */
async function live(api: Api, targets: string[]): Promise<string[]> {
  let ids = cachedLiveIds();
  if (ids === undefined || !targets.every((id) => ids?.has(id))) {
    const instances = await api.instances();
    ids = new Set(instances.filter((i) => i.status !== 'deleted').map((i) => i.id));
    cache.setJson(LIVE_IDS, [...ids], LIVE_IDS_TTL_MS);
  }
  const existing = ids;
  const gone = targets.filter((id) => !existing.has(id));
  if (gone.length > 0) {
    log.info(`not targeting instances that no longer exist: ${JSON.stringify(gone)}`);
  }
  return targets.filter((id) => existing.has(id));
}

/** The cached ids of live instances; a value that is not a list of strings counts as none. */
function cachedLiveIds(): Set<string> | undefined {
  const cached = cache.getJson(LIVE_IDS);
  if (!Array.isArray(cached) || !cached.every((id) => typeof id === 'string')) {
    return undefined;
  }
  return new Set(cached as string[]);
}

/**
 * The answer of `write`. A failed write may have named an instance the cached list still
 * had: the next attempt lists instances afresh.
 */
async function unlessStale<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    cache.delete(LIVE_IDS);
    throw error;
  }
}

/** The status of an active load balancer; a `retry-after` while it is provisioning. */
function readyStatus(lb: LoadBalancer): LbStatus {
  const point = ingress(lb);
  if (point === undefined) {
    throw ProviderError.retryAfter(
      PROVISIONING_RETRY_MS,
      `load balancer ${lb.name} is being provisioned`,
    );
  }
  return { ingress: [point] };
}

/** The ingress point of `lb`, once it is active and has an address. */
function ingress(lb: LoadBalancer): LbIngress | undefined {
  if (lb.status !== 'active' || (lb.ip === null && lb.hostname === null)) {
    return undefined;
  }
  const mode: IpMode = lb.proxy_protocol ? 'proxy' : 'vip';
  return {
    ip: lb.ip ?? undefined,
    hostname: lb.hostname ?? undefined,
    // Kubernetes accepts an ip-mode only next to an IP.
    ipMode: lb.ip === null ? undefined : mode,
    ports: lb.listeners.map((l) => ({ port: l.port, protocol: l.protocol })),
  };
}
