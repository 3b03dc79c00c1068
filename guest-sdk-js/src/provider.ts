/**
 * The provider functions as TypeScript interfaces, and `exportProvider`, which turns a
 * provider into the component's exports: every function a provider leaves out answers
 * `not-implemented`, every exception becomes a contract error (never a trap), and a
 * function may be `async` (componentize-js runs the event loop until its promise settles).
 */

import type { NodeSet } from 'wasm-ccm:provider/node-sets@0.1.0';
import type {
  Capabilities,
  InstanceMetadata,
  LbStatus,
  Node,
  Route,
  Service,
} from 'wasm-ccm:provider/types@0.1.0';

import { ProviderError, toProviderError } from './errors.js';
import { log } from './host.js';

/** A value or a promise of it. */
export type Answer<T> = T | Promise<T>;

/** `cloudprovider.InstancesV2`. */
export interface Instances {
  instanceExists(node: Node): Answer<boolean>;
  instanceShutdown(node: Node): Answer<boolean>;
  instanceMetadata(node: Node): Answer<InstanceMetadata>;
}

/**
 * The nodes a load balancer should send traffic to, in node-name order: lent by the host as
 * a node set, of which a provider copies in only the fields it reads, or, from a host
 * without node sets, a list. Read the field you need: `names()`, `providerIds()`, or
 * `all()` for whole nodes (labels and annotations as `init` declares them). Lent for one
 * call: keep what you read, never the `Nodes`.
 */
export class Nodes {
  /** Whole nodes read from a node set per host call (as the Rust SDK). */
  static readonly BATCH = 1024;

  private constructor(
    private readonly lent: NodeSet | undefined,
    private readonly listed: Node[] | undefined,
  ) {}

  /** The nodes of a lent node set. */
  static lent(set: NodeSet): Nodes {
    return new Nodes(set, undefined);
  }

  /** The nodes of a list. */
  static listed(nodes: Node[]): Nodes {
    return new Nodes(undefined, nodes);
  }

  /** How many nodes. */
  get length(): number {
    return this.listed?.length ?? this.lent?.len() ?? 0;
  }

  /** The nodes' names, in order. */
  names(): string[] {
    return this.listed?.map((node) => node.name) ?? this.lent?.names() ?? [];
  }

  /** The nodes' provider IDs, in order; `undefined` for a node without one. */
  providerIds(): (string | undefined)[] {
    return this.listed?.map((node) => node.providerId) ?? this.lent?.providerIds() ?? [];
  }

  /** Every node whole, read `BATCH` at a time from a node set. */
  all(): Node[] {
    if (this.lent === undefined) {
      return [...(this.listed ?? [])];
    }
    const nodes: Node[] = [];
    const total = this.lent.len();
    while (nodes.length < total) {
      const batch = this.lent.nodes(nodes.length, Nodes.BATCH);
      if (batch.length === 0) {
        break;
      }
      nodes.push(...batch);
    }
    return nodes;
  }
}

/** `cloudprovider.LoadBalancer`. */
export interface LoadBalancer {
  getLoadBalancer(clusterName: string, svc: Service): Answer<LbStatus | undefined>;
  getLoadBalancerName(clusterName: string, svc: Service): string;
  ensureLoadBalancer(clusterName: string, svc: Service, nodes: Nodes): Answer<LbStatus>;
  updateLoadBalancer(clusterName: string, svc: Service, nodes: Nodes): Answer<void>;
  ensureLoadBalancerDeleted(clusterName: string, svc: Service): Answer<void>;
}

/** `cloudprovider.Routes`. */
export interface Routes {
  listRoutes(clusterName: string): Answer<Route[]>;
  createRoute(clusterName: string, nameHint: string, route: Route): Answer<void>;
  deleteRoute(clusterName: string, route: Route): Answer<void>;
}

/** A provider: `init`, and whichever functions it implements. */
export interface Provider {
  /** Validate the cloud configuration and report what the provider supports. */
  init(config: Uint8Array | undefined): Answer<Capabilities>;
  instances?: Partial<Instances>;
  loadBalancer?: Partial<LoadBalancer>;
  routes?: Partial<Routes>;
}

/** The plain `load-balancer` export: its node-carrying calls get the nodes as a list. */
export interface LoadBalancerExport {
  getLoadBalancer(clusterName: string, svc: Service): Promise<LbStatus | undefined>;
  getLoadBalancerName(clusterName: string, svc: Service): string;
  ensureLoadBalancer(clusterName: string, svc: Service, nodes: Node[]): Promise<LbStatus>;
  updateLoadBalancer(clusterName: string, svc: Service, nodes: Node[]): Promise<void>;
  ensureLoadBalancerDeleted(clusterName: string, svc: Service): Promise<void>;
}

/** The `load-balancer-node-sets` export: the node-carrying calls with a lent node set. */
export interface LoadBalancerNodeSetsExport {
  ensureLoadBalancer(clusterName: string, svc: Service, nodes: NodeSet): Promise<LbStatus>;
  updateLoadBalancer(clusterName: string, svc: Service, nodes: NodeSet): Promise<void>;
}

/** The component's exports, to re-export from the entry module under these names. */
export interface Exports {
  provider: { init: Provider['init'] };
  instances: Instances;
  loadBalancer: LoadBalancerExport;
  loadBalancerNodeSets: LoadBalancerNodeSetsExport;
  routes: Routes;
}

/**
 * The exports of `provider`. Re-export them from the entry module:
 * `export const { provider, instances, loadBalancer, loadBalancerNodeSets, routes } =
 * exportProvider(myProvider);`
 */
export function exportProvider(impl: Provider): Exports {
  const instances = impl.instances ?? {};
  const loadBalancer = impl.loadBalancer ?? {};
  const routes = impl.routes ?? {};
  return {
    provider: { init: (config) => guard(() => impl.init(config)) },
    instances: {
      instanceExists: (node) => guard(() => call(instances.instanceExists, instances, node)),
      instanceShutdown: (node) => guard(() => call(instances.instanceShutdown, instances, node)),
      instanceMetadata: (node) => guard(() => call(instances.instanceMetadata, instances, node)),
    },
    loadBalancer: {
      getLoadBalancer: (cluster, svc) =>
        guard(() => call(loadBalancer.getLoadBalancer, loadBalancer, cluster, svc)),
      getLoadBalancerName: (cluster, svc) => loadBalancerName(loadBalancer, cluster, svc),
      ensureLoadBalancer: (cluster, svc, nodes) =>
        guard(() =>
          call(loadBalancer.ensureLoadBalancer, loadBalancer, cluster, svc, Nodes.listed(nodes)),
        ),
      updateLoadBalancer: (cluster, svc, nodes) =>
        guard(() =>
          call(loadBalancer.updateLoadBalancer, loadBalancer, cluster, svc, Nodes.listed(nodes)),
        ),
      ensureLoadBalancerDeleted: (cluster, svc) =>
        guard(() => call(loadBalancer.ensureLoadBalancerDeleted, loadBalancer, cluster, svc)),
    },
    loadBalancerNodeSets: {
      ensureLoadBalancer: (cluster, svc, nodes) =>
        guard(() =>
          call(loadBalancer.ensureLoadBalancer, loadBalancer, cluster, svc, Nodes.lent(nodes)),
        ),
      updateLoadBalancer: (cluster, svc, nodes) =>
        guard(() =>
          call(loadBalancer.updateLoadBalancer, loadBalancer, cluster, svc, Nodes.lent(nodes)),
        ),
    },
    routes: {
      listRoutes: (cluster) => guard(() => call(routes.listRoutes, routes, cluster)),
      createRoute: (cluster, hint, route) =>
        guard(() => call(routes.createRoute, routes, cluster, hint, route)),
      deleteRoute: (cluster, route) =>
        guard(() => call(routes.deleteRoute, routes, cluster, route)),
    },
  };
}

/** Upstream's `DefaultLoadBalancerName`: `"a"` + the Service UID without dashes, 32 characters at most. */
export function defaultLoadBalancerName(svc: Service): string {
  return ('a' + svc.uid.replaceAll('-', '')).slice(0, 32);
}

/**
 * The provider's name for the load balancer of `svc`. The contract gives this function no
 * error channel, so a provider without one, or whose one throws (logged), gets upstream's
 * `DefaultLoadBalancerName` rather than a trapped call.
 */
function loadBalancerName(impl: Partial<LoadBalancer>, cluster: string, svc: Service): string {
  if (impl.getLoadBalancerName === undefined) {
    return defaultLoadBalancerName(svc);
  }
  try {
    return impl.getLoadBalancerName(cluster, svc);
  } catch (error) {
    log.warn(`get-load-balancer-name failed, using the default name: ${String(error)}`);
    return defaultLoadBalancerName(svc);
  }
}

/** `f` bound to `self` with `args`, or `not-implemented` when the provider has no `f`. */
function call<A extends unknown[], R>(
  f: ((...args: A) => R) | undefined,
  self: object,
  ...args: A
): R {
  if (f === undefined) {
    throw ProviderError.notImplemented();
  }
  return f.apply(self, args);
}

/** The answer of `f`, with every exception, synchronous or not, as a `ProviderError`. */
async function guard<T>(f: () => Answer<T>): Promise<T> {
  try {
    return await f();
  } catch (error) {
    throw toProviderError(error);
  }
}
