/**
 * `simcloud-ts`: the reference provider for the cloud simulator (`tests/cloud-sim`) written
 * in TypeScript with the wasm-ccm SDK (`guest-sdk-js`), making the same cloud requests as the
 * Rust simcloud (`guests/simcloud`). This file owns the provider's identity (`init` and its
 * capabilities) and the component's exports.
 *
 * It implements `init` and the instances functions; load balancers and routes answer
 * `not-implemented` and the capabilities say so. Cloud config and provider IDs are the Rust
 * simcloud's (see `config.ts`, `instances.ts`); it has no build stamp.
 */

import { exportProvider, log } from '@wasm-ccm/provider-sdk';
import type { Provider } from '@wasm-ccm/provider-sdk';

import { parseConfig } from './config.js';
import { simcloudInstances } from './instances.js';

const simcloud: Provider = {
  init(config) {
    const parsed = parseConfig(config);
    log.info(`simcloud provider (TypeScript) for ${parsed.apiUrl}`);
    return {
      name: 'simcloud',
      instances: true,
      loadBalancer: false,
      routes: false,
      hasClusterId: true,
      // Nodes are found by provider ID and name: no label or annotation is read.
      nodeMetadata: { labels: [], annotations: [] },
    };
  },
  instances: simcloudInstances,
};

export const { provider, instances, loadBalancer, routes } = exportProvider(simcloud);
