/**
 * The wasm-ccm provider SDK for TypeScript and JavaScript: the contract's types (generated
 * from `wit/provider.wit` by jco), the provider functions with `not-implemented` defaults
 * (`exportProvider`), the host's log, cloud configuration and cache, and an HTTP client
 * that goes through the host's egress gate.
 */

export type {
  AddressKind,
  Capabilities,
  InstanceMetadata,
  IpMode,
  LbIngress,
  LbStatus,
  Node,
  NodeAddress,
  NodeMetadataKeys,
  PortStatus,
  Protocol,
  Route,
  Service,
  ServicePort,
} from 'wasm-ccm:provider/types@0.1.0';
export { ProviderError, toProviderError } from './errors.js';
export { cache, config, log } from './host.js';
export * as http from './http.js';
export { HttpError, HttpResponse } from './http.js';
export type {
  Answer,
  Exports,
  Instances,
  LoadBalancer,
  LoadBalancerExport,
  LoadBalancerNodeSetsExport,
  Provider,
  Routes,
} from './provider.js';
export { Nodes, defaultLoadBalancerName, exportProvider } from './provider.js';
