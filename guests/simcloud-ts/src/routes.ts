/**
 * `Routes`, as the Rust simcloud's `routes.rs`: pod-CIDR routes in the simulator's network,
 * owned per cluster. Owns route naming (`<cluster>-<node-uid>-<cidr with every
 * non-alphanumeric character as '-'>`, distinct for the two CIDRs of a dual-stack node) and
 * the mapping between simulator routes (which target instance ids) and contract routes (which
 * target node names; `list-routes` reports the simulator's route id as the route's name).
 */

import { HttpError, ProviderError, log } from '@wasm-ccm/provider-sdk';
import type { Route as ContractRoute, Routes } from '@wasm-ccm/provider-sdk';

import { Api } from './api.js';
import { byName } from './instances.js';
import type { NewRoute, Route } from './model.js';

export const simcloudRoutes: Routes = {
  async listRoutes(clusterName) {
    const api = Api.load();
    const routes = await api.routes(clusterName);
    // Names of the instances by id: one listing instead of one lookup per route.
    const names = new Map((await api.instances()).map((i) => [i.id, i.name] as const));
    return routes.map((route) => contractRoute(route, names));
  },

  async createRoute(clusterName, nameHint, route) {
    const api = Api.load();
    const instance = await byName(api, route.targetNode);
    if (instance === undefined) {
      throw ProviderError.notFound(`no simcloud instance named ${route.targetNode}`);
    }
    const name = routeName(clusterName, nameHint, route.destinationCidr);
    const wanted: NewRoute = {
      name,
      cluster: clusterName,
      destination_cidr: route.destinationCidr,
      target_instance: instance.id,
    };
    let created: Route;
    try {
      created = await api.createRoute(wanted);
    } catch (error) {
      if (error instanceof HttpError && error.status === 409) {
        return alreadyRouted(api, wanted, error);
      }
      throw error;
    }
    log.info(
      `created route ${name} (${created.id}): ${created.destination_cidr} via ` +
        `${route.targetNode} (${instance.id})`,
    );
  },

  async deleteRoute(clusterName, route) {
    const api = Api.load();
    const existing = find(await api.routes(clusterName), route);
    if (existing === undefined) {
      return;
    }
    if (await api.deleteRoute(existing.id)) {
      log.info(
        `deleted route ${existing.id} (${existing.destination_cidr}) of cluster ${clusterName}`,
      );
    }
  },
};

/** `<cluster>-<nameHint>-<cidr>` with every non-alphanumeric character of the CIDR as `-`. */
function routeName(cluster: string, nameHint: string, cidr: string): string {
  // `u`: a character outside the BMP is one `-`, as in the Rust simcloud.
  return `${cluster}-${nameHint}-${cidr.replace(/[^A-Za-z0-9]/gu, '-')}`;
}

/** The contract view of `route`; a route to a gone instance targets the instance id. */
function contractRoute(route: Route, names: Map<string, string>): ContractRoute {
  return {
    name: route.id,
    targetNode: names.get(route.target_instance) ?? route.target_instance,
    enableNodeAddresses: false,
    targetNodeAddresses: [],
    destinationCidr: route.destination_cidr,
    blackhole: route.blackhole,
  };
}

/**
 * The simulator route `route` stands for: by id (its name from `list-routes`) or the
 * simulator's name; a route without a name by destination CIDR.
 */
function find(routes: Route[], route: ContractRoute): Route | undefined {
  if (route.name === '') {
    return routes.find((r) => r.destination_cidr === route.destinationCidr);
  }
  return routes.find((r) => r.id === route.name || r.name === route.name);
}

/** A 409 on create: fine if the existing route for the CIDR targets the same instance. */
async function alreadyRouted(api: Api, wanted: NewRoute, conflict: HttpError): Promise<void> {
  const routes = await api.routes(wanted.cluster);
  const existing = routes.find((r) => r.destination_cidr === wanted.destination_cidr);
  if (existing === undefined) {
    throw conflict;
  }
  if (existing.target_instance !== wanted.target_instance) {
    throw ProviderError.other(
      `cluster ${wanted.cluster} already routes ${wanted.destination_cidr} to ` +
        `${existing.target_instance}, not ${wanted.target_instance}`,
    );
  }
}
