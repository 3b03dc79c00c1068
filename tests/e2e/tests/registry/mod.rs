//! Providers from an OCI registry, against Debian's `docker-registry` on loopback (plain, and
//! behind htpasswd basic auth) and ORAS's Python SDK as an independent client
//! (`e2e::registry`; `make test` installs both).

mod harness;
mod distribution;
mod signatures;
mod tag_drift;
mod token_auth;
