/**
 * The cloud configuration (`--cloud-config`), as the Rust simcloud reads it: JSON
 * `{"api_url": "http://127.0.0.1:8080", "proxy_protocol": false, "target_node_label_keys": []}`,
 * `api_url` required (an `http://` or `https://` URL without query), `proxy_protocol` a
 * boolean (default false), `target_node_label_keys` the distinct node label keys a Service's
 * target-node-labels annotation may name (default none), unknown fields refused. Parsed and
 * validated by `init`, re-read by every call.
 */

import { ProviderError, config as hostConfig } from '@wasm-ccm/provider-sdk';

/** The validated configuration. */
export interface Config {
  /** Base URL of the simulator, without a trailing slash. */
  apiUrl: string;
  /** Whether load balancers send the PROXY protocol to their targets. */
  proxyProtocol: boolean;
  /**
   * The node label keys a Service's target-node-labels annotation may name: the labels
   * `init` declares in `node-metadata`, so the host passes them (and no other).
   */
  targetNodeLabelKeys: string[];
}

/** The field listing the node label keys the target-node-labels annotation may name. */
export const TARGET_NODE_LABEL_KEYS = 'target_node_label_keys';

const FIELDS = ['api_url', 'proxy_protocol', TARGET_NODE_LABEL_KEYS];

/** Parse and validate configuration bytes (by default this version's); none lacks `api_url`. */
export function parseConfig(bytes: Uint8Array | undefined = hostConfig.raw()): Config {
  const raw = hostConfig.json(bytes);
  for (const field of Object.keys(raw)) {
    if (!FIELDS.includes(field)) {
      throw ProviderError.other(
        `invalid cloud config: unknown field ${JSON.stringify(field)}, expected one of ${FIELDS.join(', ')}`,
      );
    }
  }
  const proxyProtocol = raw['proxy_protocol'] ?? false;
  if (typeof proxyProtocol !== 'boolean') {
    throw ProviderError.other('invalid cloud config: "proxy_protocol" must be true or false');
  }
  const apiUrl = raw['api_url'];
  if (apiUrl === undefined || apiUrl === null) {
    throw ProviderError.other('simcloud cloud config: "api_url" is required (set --cloud-config)');
  }
  if (typeof apiUrl !== 'string') {
    throw ProviderError.other('invalid cloud config: "api_url" must be a string');
  }
  return {
    apiUrl: validatedUrl(apiUrl),
    proxyProtocol,
    targetNodeLabelKeys: labelKeys(raw[TARGET_NODE_LABEL_KEYS]),
  };
}

/** `target_node_label_keys`: a list of distinct Kubernetes label keys, if given. */
function labelKeys(value: unknown): string[] {
  if (value === undefined || value === null) {
    return [];
  }
  const fail = (detail: string) =>
    ProviderError.other(
      `simcloud cloud config: "${TARGET_NODE_LABEL_KEYS}" must be a list of node label keys ` +
        `such as ["node-role.example.com/lb"]: ${detail}`,
    );
  if (!Array.isArray(value)) {
    throw fail(`got ${JSON.stringify(value)}`);
  }
  const keys: string[] = [];
  for (const item of value as unknown[]) {
    if (typeof item !== 'string') {
      throw fail(`${JSON.stringify(item)} is not a string`);
    }
    if (!isLabelKey(item)) {
      throw fail(`${JSON.stringify(item)} is not a label key`);
    }
    if (keys.includes(item)) {
      throw fail(`${JSON.stringify(item)} is listed twice`);
    }
    keys.push(item);
  }
  return keys;
}

/**
 * A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
 * letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
 */
function isLabelKey(key: string): boolean {
  const slash = key.lastIndexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = key.slice(slash + 1);
  const prefixOk =
    prefix === undefined ||
    (prefix.length <= 253 &&
      prefix.split('.').every((part) => /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(part)));
  return prefixOk && /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/.test(name);
}

/** `url` without trailing slashes if it is an absolute `http(s)://host[...]` URL. */
function validatedUrl(url: string): string {
  const invalid = () =>
    ProviderError.other(
      `simcloud cloud config: "api_url" must be an http:// or https:// URL without query, got ${JSON.stringify(url)}`,
    );
  const separator = url.indexOf('://');
  if (separator < 0) {
    throw invalid();
  }
  const scheme = url.slice(0, separator).toLowerCase();
  const rest = url.slice(separator + 3);
  if (
    (scheme !== 'http' && scheme !== 'https') ||
    rest === '' ||
    rest.startsWith('/') ||
    /[?#@]/.test(rest)
  ) {
    throw invalid();
  }
  return url.replace(/\/+$/, '');
}
