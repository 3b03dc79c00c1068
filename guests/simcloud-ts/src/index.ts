/**
 * `simcloud-ts`: the reference provider for the cloud simulator (`tests/cloud-sim`) written
 * in TypeScript with the wasm-ccm SDK (`guest-sdk-js`), making the same cloud requests as the
 * Rust simcloud (`guests/simcloud`). This file owns the provider's identity (`init` and its
 * capabilities) and the component's exports.
 *
 * It implements every function of the `cloud-provider` world: `init`, instances
 * (`instances.ts`), load balancers (`loadBalancers.ts`) and routes (`routes.ts`), with the
 * Rust simcloud's cloud config, provider IDs, load-balancer and route names (see
 * `config.ts`) and annotations (`targets.ts`). Load-balancer calls get the nodes lent as a
 * node set (`cloud-provider-node-sets`), of which it reads the provider IDs, and the names
 * only of nodes it skips; whole nodes only for a Service choosing its targets by node labels
 * (`simcloud.wasm-ccm.io/load-balancer-target-node-labels`). It has no build stamp.
 */

import { exportProvider, log } from '@wasm-ccm/provider-sdk';
import type { Provider } from '@wasm-ccm/provider-sdk';

import { parseConfig } from './config.js';
import { simcloudInstances } from './instances.js';
import { simcloudLoadBalancer } from './loadBalancers.js';
import { simcloudRoutes } from './routes.js';

const simcloud: Provider = {
  init(config) {
    const parsed = parseConfig(config);
    log.info(`simcloud provider (TypeScript) for ${parsed.apiUrl}`);
    return {
      name: 'simcloud',
      instances: true,
      loadBalancer: true,
      routes: true,
      hasClusterId: true,
      // Nodes are found by provider ID and name; only the labels Services may choose their
      // targets by are read, and no annotation.
      nodeMetadata: { labels: parsed.targetNodeLabelKeys, annotations: [] },
    };
  },
  instances: simcloudInstances,
  loadBalancer: simcloudLoadBalancer,
  routes: simcloudRoutes,
};

export const { provider, instances, loadBalancer, loadBalancerNodeSets, routes } =
  exportProvider(simcloud);
