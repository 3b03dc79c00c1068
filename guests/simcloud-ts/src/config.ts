/**
 * The cloud configuration (`--cloud-config`), as the Rust simcloud reads it: JSON
 * `{"api_url": "http://127.0.0.1:8080", "proxy_protocol": false}`, `api_url` required (an
 * `http://` or `https://` URL without query), `proxy_protocol` a boolean (default false),
 * unknown fields refused. Parsed and validated by `init`, re-read by every call.
 */

import { ProviderError, config as hostConfig } from '@wasm-ccm/provider-sdk';

/** The validated configuration. */
export interface Config {
  /** Base URL of the simulator, without a trailing slash. */
  apiUrl: string;
  /** Whether load balancers send the PROXY protocol to their targets. */
  proxyProtocol: boolean;
}

const FIELDS = ['api_url', 'proxy_protocol'];

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
  return { apiUrl: validatedUrl(apiUrl), proxyProtocol };
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
