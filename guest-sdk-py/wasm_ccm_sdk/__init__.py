"""wasm-ccm's SDK for cloud providers written in Python and built with componentize-py.

This package owns what a Python provider needs besides the bindings componentize-py
generates from `wit/provider.wit` (the `wit_world` package, made at build time): base
classes for the contract's interfaces whose functions answer `not-implemented` until a
provider overrides them (`wasm_ccm_sdk.provider`), the contract's errors
(`wasm_ccm_sdk.errors`), the host's log, cache and cloud configuration
(`wasm_ccm_sdk.host`) and an HTTP client over `wasi:http` that behaves under the host's
egress gate (`wasm_ccm_sdk.http`).

A provider module defines one class per exported interface, named as componentize-py
expects (`Provider`, `Instances`, `LoadBalancer`, `Routes`), each subclassing the base
class of the same name here, and re-exports `LoadBalancerNodeSets` from
`wasm_ccm_sdk.provider` as it is (the load-balancer calls with their nodes lent as a node
set, passed on to its `LoadBalancer` as `Nodes`). Build it against the world
`cloud-provider-py` (`wit/` in a project made by `wasm-ccm provider new --language python`,
whose `build.sh` has the command; `guest-sdk-py/wit` in wasm-ccm's repository).
"""
