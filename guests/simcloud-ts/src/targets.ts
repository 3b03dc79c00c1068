/**
 * Which instances a Service's load balancer targets, as the Rust simcloud's `targets.rs`:
 * those of every node, or, with the annotation
 * `simcloud.wasm-ccm.io/load-balancer-target-node-labels` (`key=value,key2`, after AWS's
 * `service.beta.kubernetes.io/aws-load-balancer-target-node-labels`), those of the nodes with
 * every label it names.
 *
 * Without the annotation only the nodes' provider IDs are read (and the names of nodes
 * skipped); whole nodes (`Nodes.all()`, with the labels `init` declared) only for a Service
 * with it.
 */

import { ProviderError, log } from '@wasm-ccm/provider-sdk';
import type { Node, Nodes, Service } from '@wasm-ccm/provider-sdk';

import { TARGET_NODE_LABEL_KEYS } from './config.js';
import type { Config } from './config.js';
import { instanceIdOf } from './instances.js';

/** The Service annotation choosing target nodes by their labels. */
export const TARGET_NODE_LABELS = 'simcloud.wasm-ccm.io/load-balancer-target-node-labels';

/**
 * The labels a node needs to be a target, as upstream's `filterTargetNodes`: every label,
 * with the value where one is given (`undefined`: any value).
 */
export type NodeSelector = [key: string, value: string | undefined][];

/**
 * The selector of `svc`: `undefined` without the annotation or with no entry in it (every
 * node, as upstream). Each key must be one of the configured `target_node_label_keys`, the
 * only labels the host passes this provider; an entry without a key, with two `=`, or a key
 * given twice is refused.
 */
export function nodeSelector(svc: Service, config: Config): NodeSelector | undefined {
  const annotation = svc.annotations.find(([key]) => key === TARGET_NODE_LABELS);
  if (annotation === undefined) {
    return undefined;
  }
  const wanted: NodeSelector = [];
  const entries = annotation[1]
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  for (const entry of entries) {
    const separator = entry.indexOf('=');
    const key = separator < 0 ? entry : entry.slice(0, separator).trim();
    const value = separator < 0 ? undefined : entry.slice(separator + 1).trim();
    const bad = (why: string) => refused(svc, `entry ${JSON.stringify(entry)} ${why}`);
    if (key === '') {
      throw bad('has no label key');
    }
    if (value?.includes('=')) {
      throw bad("has more than one '=': write key=value or key");
    }
    if (wanted.some(([k]) => k === key)) {
      throw bad('names a label key given before');
    }
    if (!config.targetNodeLabelKeys.includes(key)) {
      const now = config.targetNodeLabelKeys.map((k) => JSON.stringify(k)).join(', ');
      throw refused(
        svc,
        `names node label ${JSON.stringify(key)}, which the provider does not read: add it ` +
          `to "${TARGET_NODE_LABEL_KEYS}" in the cloud config (now [${now}])`,
      );
    }
    wanted.push([key, value === '' ? undefined : value]);
  }
  return wanted.length === 0 ? undefined : wanted;
}

/** Whether a node with `labels` is a target of `selector`. */
function matches(selector: NodeSelector, labels: Node['labels']): boolean {
  return selector.every(([key, wanted]) => {
    const label = labels.find(([k]) => k === key);
    return label !== undefined && (wanted === undefined || wanted === label[1]);
  });
}

/** A refusal of the Service's annotation, naming the Service and the annotation. */
function refused(svc: Service, problem: string): ProviderError {
  return ProviderError.other(
    `service ${svc.namespace}/${svc.name}: ${TARGET_NODE_LABELS} ${problem}`,
  );
}

/**
 * The instance ids of `nodes` (only those `selector` matches, when there is one), in order
 * and without duplicates; nodes without a simcloud provider ID are skipped (and logged).
 */
export function targetIds(nodes: Nodes, selector: NodeSelector | undefined): string[] {
  let providerIds: (string | undefined)[];
  let names: string[] | undefined;
  if (selector === undefined) {
    // Only the provider IDs (and the names, to report a skipped node).
    providerIds = nodes.providerIds();
  } else {
    const all = nodes.all();
    const targets = all.filter((node) => matches(selector, node.labels));
    log.info(`${targets.length} of ${all.length} nodes have the labels of ${TARGET_NODE_LABELS}`);
    providerIds = targets.map((node) => node.providerId);
    names = targets.map((node) => node.name);
  }
  const ids = new Set<string>();
  const skipped: number[] = [];
  providerIds.forEach((providerId, index) => {
    const id = providerId === undefined ? undefined : instanceIdOf(providerId);
    if (id === undefined) {
      skipped.push(index);
    } else {
      ids.add(id);
    }
  });
  if (skipped.length > 0) {
    const skippedNames = names ?? nodes.names();
    for (const index of skipped) {
      log.info(
        `node ${skippedNames[index]} is not a load-balancer target: provider ID ` +
          `${JSON.stringify(providerIds[index] ?? null)} is not simcloud://`,
      );
    }
  }
  // A Set keeps the order of first insertion.
  return [...ids];
}
