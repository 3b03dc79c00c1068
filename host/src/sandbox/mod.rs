//! The wasmtime sandbox that runs provider components: engine, linker, limits, compile
//! cache, and one fresh `Store` per call.
//!
//! A loaded component is linked once into an `InstancePre`; every call instantiates it in a
//! new `Store`, runs one export and drops everything, so no state leaks between calls and a
//! trap or runaway guest ends only its own call. Each call gets:
//! - a memory cap (all linear memories together) and a deadline, enforced by epoch
//!   interruption for guest CPU and by a timer for time spent waiting on the host; a guest
//!   computing without pause yields its tokio worker every epoch tick (10 ms), so spinning
//!   providers cannot starve health checks, lease renewal or each other;
//! - a cap on what its answer makes the host hold (`max_result_bytes`);
//! - caps on what its `wasi:http` resources make the host hold: how many at once and how
//!   many bytes ([`http_budget`]);
//! - no preopened files, no environment, no arguments, no stdin, no sockets; stdout and
//!   stderr are captured (bounded) and logged tagged with provider and version;
//! - `wasi:http` through the egress gate only, and the contract's `host` interface;
//! - for a provider that reads load-balancer nodes itself, the call's nodes as a
//!   `node-set` ([`node_sets`]).
//!
//! Calls in flight are bounded by `max_concurrent_calls`; a call passing a node list counts
//! once more per 384 KiB of node data it passes, so `max_concurrent_calls` also bounds the
//! memory of calls in flight.
//!
//! Every contract function runs through [`Guest::call`]: [`Args`] says how its arguments
//! are lowered and [`Answer`] how its result is lifted.
//!
//! This module and `egress` are the only ones that touch wasmtime types.

mod bindings;
mod compile_cache;
mod host;
mod http_budget;
mod node_sets;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::types::{ComponentExtern, ComponentItem};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::contract::{self as c, CloudError};
use crate::egress::{Caller, Connections, Denial, EgressGate, GateHooks};
use crate::metrics::{CompileLabels, Metrics};
use crate::{bounds, text};
pub use bindings::{Answer, Args};
use bindings::{CloudProviderNodeSets, Exports, exported};
pub use compile_cache::Origin;
pub use host::{CacheLimits, LogLimits, ProviderCache, ProviderLogs};
pub use http_budget::{HttpBudget, HttpLimits};
pub use node_sets::NodeSet;

/// Bytes of node data (as [`bindings::guest_bytes`] estimates it) per extra unit of
/// `--max-concurrent-calls` a call passing a node list takes. While it runs, such a call
/// holds several times its node data in guest and host memory.
const GUEST_BYTES_PER_SLOT: usize = 384 * 1024;

/// How often the epoch advances: a guest computing without pause yields its tokio worker
/// this often, and overruns its deadline by at most this much.
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Bytes of a pooled slot's linear memory and tables kept resident between calls.
const KEEP_RESIDENT_MEMORY: usize = 2 * 1024 * 1024;
const KEEP_RESIDENT_TABLES: usize = 64 * 1024;
/// How much guest stdout and stderr one call may write before writes fail.
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// Limits and set-up of the sandbox, validated at the edge.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Most bytes of linear memory one call may use.
    pub memory_limit: u64,
    /// Longest one call may take, instantiation included.
    pub call_timeout: Duration,
    /// Preallocate instance slots (faster instantiation, reserves address space).
    pub pooling: bool,
    /// Most calls in flight at once; further calls wait for a slot.
    pub max_concurrent_calls: u32,
    /// Where precompiled components are kept; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// Most bytes of host memory one call's answer may hold (routes, labels, messages...);
    /// a larger answer fails the call with [`CallFailure::ResultTooLarge`].
    pub max_result_bytes: u64,
    /// What one provider version may keep in its cache (`--provider-cache-size`).
    pub provider_cache: CacheLimits,
    /// How much a provider may log, per call and per second (`--provider-log-*`).
    pub provider_logs: LogLimits,
    /// What one call's `wasi:http` resources may make the host hold
    /// (`--http-memory-limit`, `--max-http-resources`).
    pub http: HttpLimits,
}

/// The limits of each call that a provider version can change without a new engine:
/// everything in [`SandboxConfig`] but memory, concurrency, pooling and the cache
/// directory, which the engine is built with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallLimits {
    /// Longest one call may take, instantiation included.
    pub call_timeout: Duration,
    /// Most bytes of host memory one call's answer may hold.
    pub max_result_bytes: u64,
    /// What the version may keep in its cache.
    pub provider_cache: CacheLimits,
    /// How much it may log, per call and per second.
    pub provider_logs: LogLimits,
    /// What its `wasi:http` resources may make the host hold.
    pub http: HttpLimits,
}

impl SandboxConfig {
    /// The per-call limits of this configuration.
    pub fn call_limits(&self) -> CallLimits {
        CallLimits {
            call_timeout: self.call_timeout,
            max_result_bytes: self.max_result_bytes,
            provider_cache: self.provider_cache,
            provider_logs: self.provider_logs,
            http: self.http,
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            memory_limit: 64 * 1024 * 1024,
            call_timeout: Duration::from_secs(30),
            pooling: true,
            max_concurrent_calls: 128,
            cache_dir: None,
            max_result_bytes: 8 * 1024 * 1024,
            provider_cache: CacheLimits::default(),
            provider_logs: LogLimits::default(),
            http: HttpLimits::default(),
        }
    }
}

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The engine or linker could not be built, or the compile task died.
    #[error("cannot set up the wasm engine: {0}")]
    Engine(String),
    /// The compile cache's key cannot be used.
    #[error("compile cache {0}")]
    Cache(#[from] crate::seal::SealError),
    /// The bytes do not compile as a component.
    #[error("{origin} is not a valid WebAssembly component: {detail}")]
    Invalid {
        /// The path or reference the component was loaded from.
        origin: String,
        /// wasmtime's reason.
        detail: String,
    },
    #[error(
        "{origin} imports `{import}`, which this host does not offer (a provider may import the wasm-ccm:provider/host interface, wasi:http/outgoing-handler and the WASI 0.2 CLI interfaces): {detail}"
    )]
    /// Linking failed: the component imports something outside the host's interfaces.
    UnsatisfiedImport {
        /// The path or reference the component was loaded from.
        origin: String,
        /// The import wasmtime named, or `an unknown import` if its message names none.
        import: String,
        /// wasmtime's whole message.
        detail: String,
    },
    /// A memory of the component starts larger than `--memory-limit` lets one be: with the
    /// pooling allocator that is caught when the component is compiled.
    #[error(
        "{origin} needs a memory larger than the memory limit of {limit} bytes (--memory-limit, or spec.limits.memory of a CloudProvider): raise the limit: {detail}"
    )]
    MemoryLimit {
        /// The path or reference the component was loaded from.
        origin: String,
        /// The memory limit, in bytes.
        limit: u64,
        /// wasmtime's reason.
        detail: String,
    },
    /// A contract export is missing or has the wrong type.
    #[error("{origin} does not implement the wasm-ccm:provider@{version} contract: {detail}", version = c::CONTRACT_VERSION)]
    NotAProvider {
        /// The path or reference the component was loaded from.
        origin: String,
        /// The first export found missing or mistyped.
        detail: String,
    },
}

/// Why a call did not produce an answer from the provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// The guest trapped (a Rust panic, an `unreachable`, a failed host call...).
    #[error("the provider trapped: {message}")]
    Trap {
        /// The trap reason, plus up to the last three lines the guest wrote to stderr.
        message: String,
    },
    /// The call outlived `--timeout`, in guest code or waiting on the host.
    #[error("the provider exceeded its {limit_ms} ms deadline")]
    Deadline {
        /// `--timeout`, in milliseconds.
        limit_ms: u64,
    },
    /// The guest tried to grow its linear memories past `--memory-limit`.
    #[error("the provider exceeded its memory limit of {limit_bytes} bytes")]
    MemoryLimit {
        /// `--memory-limit`, in bytes.
        limit_bytes: u64,
    },
    /// The instance could not be created, or the sandbox is shutting down.
    #[error("the provider could not be instantiated: {message}")]
    Instantiate {
        /// wasmtime's reason, or that the sandbox is shutting down.
        message: String,
    },
    /// The answer would make the host hold more than `--max-result-size`.
    #[error(
        "the provider returned {bytes} bytes, more than the {limit_bytes} bytes a call may return"
    )]
    ResultTooLarge {
        /// Bytes the answer (or its error message) holds on the host.
        bytes: u64,
        /// `--max-result-size`, in bytes.
        limit_bytes: u64,
    },
    /// Its `wasi:http` resources would have made the host hold more than a call may.
    #[error("the provider exceeded its host budget: {budget}")]
    HttpBudget {
        /// The budget it went past, with its limit.
        budget: HttpBudget,
    },
}

/// How one call ended: the provider's answer (or contract error), or a sandbox failure.
pub type Called<T> = Result<Finished<Result<T, CloudError>>, CallFailure>;

/// What a call produced: the provider's answer and the requests the egress gate refused.
#[derive(Debug)]
pub struct Finished<T> {
    /// The provider's answer: its result or the cloud error it reported.
    pub value: T,
    /// Requests the egress gate refused during the call, oldest first; they turn a cloud
    /// error `other` into an egress denial.
    pub denials: Vec<Denial>,
    /// What the egress gate noticed that may explain a failure (a 401 from a host no
    /// credential rule covers), for the error's message.
    pub hints: Vec<String>,
}

/// The wasmtime engine and linker, shared by every provider version of a manager.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

struct SandboxInner {
    engine: Engine,
    linker: Linker<CallState>,
    config: SandboxConfig,
    cache: Option<compile_cache::CompileCache>,
    metrics: Arc<Metrics>,
    slots: Semaphore,
}

/// Compilations at once in this process: each uses every core already (parallel
/// compilation), and a large component takes ~400 MB to compile; one at a time bounds
/// both, whoever asks (a candidate, a rollback, a restart). A sound entry of the compile
/// cache is loaded without waiting.
static COMPILES: Semaphore = Semaphore::const_new(1);

/// The longest a compilation is waited for, its turn included (a 128 MiB component, the
/// largest accepted, takes about a minute on two cores); past it the version is refused.
/// The compile goes on in its thread, holding [`COMPILES`], so no second one starts beside
/// it.
pub const COMPILE_DEADLINE: Duration = Duration::from_secs(300);

impl Sandbox {
    /// Build the engine and linker; starts the epoch ticker that enforces deadlines.
    pub fn new(config: SandboxConfig, metrics: Arc<Metrics>) -> Result<Sandbox, LoadError> {
        let engine = build_engine(&config).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let linker = build_linker(&engine).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        start_epoch_ticker(&engine);
        let cache = match config.cache_dir.clone() {
            Some(dir) => Some(compile_cache::CompileCache::new(dir, &engine)?),
            None => None,
        };
        let slots = Semaphore::new(config.max_concurrent_calls as usize);
        Ok(Sandbox {
            inner: Arc::new(SandboxInner {
                engine,
                linker,
                config,
                cache,
                metrics,
                slots,
            }),
        })
    }

    /// The limits calls run under.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Compile (or load from the cache) and link the component in `wasm`. `origin` names it
    /// in errors (a path or reference).
    pub async fn load(&self, wasm: Arc<[u8]>, origin: &str) -> Result<Image, LoadError> {
        let (component, digest, source) = self.compile(wasm, origin).await?;
        let (pre, exports) = self.link(&component, origin)?;
        Ok(Image {
            sandbox: self.inner.clone(),
            pre,
            exports,
            digest,
            origin: source,
        })
    }

    /// Describe the component in `wasm`: digest, imports, exports, and whether it satisfies
    /// the host contract.
    pub async fn inspect(&self, wasm: Arc<[u8]>, origin: &str) -> Result<Inspection, LoadError> {
        let size = wasm.len();
        let (component, digest, _) = self.compile(wasm, origin).await?;
        let engine = &self.inner.engine;
        let ty = component.component_type();
        let describe = |(name, item): (&str, ComponentExtern<'_>)| match item.ty {
            ComponentItem::ComponentInstance(_) => format!("instance {name}"),
            ComponentItem::ComponentFunc(_) => format!("func {name}"),
            ComponentItem::Resource(_) => format!("resource {name}"),
            _ => format!("item {name}"),
        };
        let imports: Vec<String> = ty.imports(engine).map(describe).collect();
        let exports: Vec<String> = ty.exports(engine).map(describe).collect();
        let contract_version = ty.exports(engine).find_map(|(name, _)| {
            let rest = name.strip_prefix(c::CONTRACT_PACKAGE)?;
            rest.split_once('@').map(|(_, version)| version.to_string())
        });
        let problem = self.link(&component, origin).err().map(|e| e.to_string());
        Ok(Inspection {
            digest,
            size,
            contract_version,
            imports,
            exports,
            problem,
        })
    }

    async fn compile(
        &self,
        wasm: Arc<[u8]>,
        origin: &str,
    ) -> Result<(Component, String, Origin), LoadError> {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&wasm)));
        let inner = self.inner.clone();
        let hex_digest = digest["sha256:".len()..].to_string();
        // A sound cache entry is loaded at once, whatever compiles meanwhile.
        if inner.cache.is_some() {
            let (inner, hex_digest) = (inner.clone(), hex_digest.clone());
            let cached = tokio::task::spawn_blocking(move || {
                inner
                    .cache
                    .as_ref()
                    .and_then(|cache| cache.cached(&inner.engine, &hex_digest))
            })
            .await
            .map_err(|e| LoadError::Engine(format!("compile cache task failed: {e}")))?;
            if let Some(component) = cached {
                self.count_compile(Origin::Cache);
                return Ok((component, digest, Origin::Cache));
            }
        }
        // Waiting for the slot counts against the deadline; the slot is held by the compile
        // itself, so one that outlives its deadline keeps the next waiting.
        let compiling = async {
            let permit = COMPILES
                .acquire()
                .await
                .map_err(|e| LoadError::Engine(format!("compile slot: {e}")))?;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                match &inner.cache {
                    Some(cache) => cache.load_or_compile(&inner.engine, &wasm, &hex_digest),
                    None => Component::new(&inner.engine, &*wasm).map(|c| (c, Origin::Compiled)),
                }
            })
            .await
            .map_err(|e| LoadError::Engine(format!("compile task failed: {e}")))
        };
        let compiled = tokio::time::timeout(COMPILE_DEADLINE, compiling)
            .await
            .map_err(|_| LoadError::Invalid {
                origin: origin.to_string(),
                detail: format!(
                    "compiling it (one compilation at a time) took longer than {}s; refused",
                    COMPILE_DEADLINE.as_secs()
                ),
            })??;
        // wasmtime's reason may quote the component's own names.
        let (component, source) = compiled.map_err(|e| {
            let origin = origin.to_string();
            let detail = text::ellipsized(text::escaped(&format!("{e:#}")).into_owned(), 2048);
            // The pooling allocator's memory slots are `--memory-limit` large, and it refuses
            // a component whose memory starts larger than a slot.
            let memory_too_large = self.inner.config.pooling
                && e.chain().any(|cause| {
                    cause
                        .to_string()
                        .starts_with("memory has a minimum byte size")
                });
            if memory_too_large {
                LoadError::MemoryLimit {
                    origin,
                    limit: self.inner.config.memory_limit,
                    detail,
                }
            } else {
                LoadError::Invalid { origin, detail }
            }
        })?;
        self.count_compile(source);
        Ok((component, digest, source))
    }

    fn count_compile(&self, source: Origin) {
        self.inner
            .metrics
            .compiles
            .get_or_create(&CompileLabels {
                source: source.label().into(),
            })
            .inc();
    }

    fn link(
        &self,
        component: &Component,
        origin: &str,
    ) -> Result<(InstancePre<CallState>, Arc<Exports>), LoadError> {
        let instance_pre = self.inner.linker.instantiate_pre(component).map_err(|e| {
            let detail = format!("{e:#}");
            let import = detail
                .split('`')
                .nth(1)
                .unwrap_or("an unknown import")
                .to_string();
            LoadError::UnsatisfiedImport {
                origin: origin.to_string(),
                import,
                detail,
            }
        })?;
        let exports = Exports::new(&instance_pre).map_err(|e| LoadError::NotAProvider {
            origin: origin.to_string(),
            detail: format!("{e:#}"),
        })?;
        Ok((instance_pre, Arc::new(exports)))
    }
}

/// What `inspect` found in a component.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inspection {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// Size of the component, in bytes.
    pub size: usize,
    /// The `wasm-ccm:provider` version its exports name (e.g. `0.1.0`); `None` if none do.
    pub contract_version: Option<String>,
    /// Each import as `instance NAME`, `func NAME`, `resource NAME` or `item NAME`.
    pub imports: Vec<String>,
    /// Each export, written as the imports are.
    pub exports: Vec<String>,
    /// Why the component does not satisfy the host contract, if it does not.
    pub problem: Option<String>,
}

fn build_engine(config: &SandboxConfig) -> wasmtime::Result<Engine> {
    let mut wasm = wasmtime::Config::new();
    wasm.epoch_interruption(true);
    wasm.wasm_component_model(true);
    if config.pooling {
        let slots = config.max_concurrent_calls;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(16))
            .total_memories(slots.saturating_mul(2))
            .total_tables(slots.saturating_mul(16))
            .total_stacks(slots)
            .max_memory_size(usize::try_from(config.memory_limit).unwrap_or(usize::MAX))
            // A provider's memory, tables and stack are small after most calls: resetting a
            // slot by zeroing what stays resident is cheaper than returning it to the kernel,
            // and with PAGEMAP_SCAN (Linux 6.7+; off by default in wasmtime 48) only the pages
            // the call dirtied are zeroed: 4.6 µs instead of 15.7 µs per call.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
            .table_keep_resident(KEEP_RESIDENT_TABLES);
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&wasm)
}

fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    http_budget::shadow(&mut linker)?;
    CloudProviderNodeSets::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
    Ok(linker)
}

/// Advance the engine's epoch every tick until the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
        .unwrap_or_else(|err| {
            tracing::error!("cannot start the epoch ticker, deadlines rely on timers only: {err}")
        });
}

/// A compiled and linked provider component, ready to be bound to an environment.
#[derive(Clone)]
pub struct Image {
    sandbox: Arc<SandboxInner>,
    pre: InstancePre<CallState>,
    exports: Arc<Exports>,
    digest: String,
    origin: Origin,
}

impl Image {
    /// `sha256:<hex>` of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Where its machine code came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The per-call limits of the sandbox it was loaded into, for its [`GuestEnv`].
    pub fn call_limits(&self) -> CallLimits {
        self.sandbox.config.call_limits()
    }

    /// Whether the provider reads load-balancer nodes through a `node-set` (it exports
    /// `load-balancer-node-sets`) rather than taking them as a `list<node>`.
    pub fn reads_node_sets(&self) -> bool {
        self.exports.reads_node_sets()
    }

    /// This image with the environment its calls see.
    pub fn bind(&self, env: GuestEnv) -> Guest {
        Guest {
            image: self.clone(),
            env: Arc::new(env),
        }
    }
}

/// What calls of one provider version share: who it is (for logs and audit), its egress
/// gate, its cache and its cloud configuration.
pub struct GuestEnv {
    /// Provider name and version, tagging its logs, metrics and egress audit records.
    pub caller: Arc<Caller>,
    /// The gate every `wasi:http` request goes through.
    pub egress: Arc<EgressGate>,
    /// This version's pooled connections (from [`EgressGate::connections`]), reused across
    /// its calls and dropped with it.
    pub connections: Arc<Connections>,
    /// The version's cache, kept across calls (`--provider-cache-size`).
    pub cache: ProviderCache,
    /// The bytes of `--cloud-config` (`--config` for `provider call`), which
    /// `host.cloud-config` returns.
    pub cloud_config: Option<Arc<[u8]>>,
    /// The node labels and annotations calls pass (`None`: all), from `init`.
    pub node_metadata: Option<c::NodeMetadataKeys>,
    /// The rate its log lines are held to, across calls.
    pub logs: ProviderLogs,
    /// The limits of each call.
    pub limits: CallLimits,
}

/// A provider version ready to be called; cheap to clone.
#[derive(Clone)]
pub struct Guest {
    image: Image,
    env: Arc<GuestEnv>,
}

/// The state of one call's `Store`.
pub(crate) struct CallState {
    wasi: WasiCtx,
    /// Holds at most `--max-http-resources` entries.
    table: ResourceTable,
    /// The requests in flight, which the `wasi:http` memory budget counts.
    http_in_flight: http_budget::InFlight,
    http: WasiHttpCtx,
    hooks: GateHooks,
    limiter: MemoryCap,
    env: Arc<GuestEnv>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// The host interface's limits and this call's log tally.
    host: host::HostState,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// Caps the sum of all linear memories of one call and remembers hitting the cap.
struct MemoryCap {
    limit: usize,
    used: usize,
    exceeded: bool,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let used = self.used - current.min(self.used) + desired;
        if used > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        self.used = used;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

impl Guest {
    /// The image this guest runs.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Who this guest is in logs and audit.
    pub fn caller(&self) -> &Caller {
        &self.env.caller
    }

    /// The egress gate this guest's requests pass.
    pub fn egress(&self) -> &Arc<EgressGate> {
        &self.env.egress
    }

    /// The limits of each of its calls.
    pub fn limits(&self) -> &CallLimits {
        &self.env.limits
    }

    /// This guest as its `init` described it: under the name it reported, and seeing only
    /// the node metadata it reads, its cache and log budgets' series made at 0. Image, cache
    /// and configuration are shared.
    pub fn initialised(&self, caller: Caller, capabilities: &c::Capabilities) -> Guest {
        host::create_budget_series(&self.image.sandbox.metrics, &caller);
        Guest {
            image: self.image.clone(),
            env: Arc::new(GuestEnv {
                caller: Arc::new(caller),
                egress: self.env.egress.clone(),
                connections: self.env.connections.clone(),
                cache: self.env.cache.clone(),
                cloud_config: self.env.cloud_config.clone(),
                node_metadata: capabilities.node_metadata.clone(),
                logs: self.env.logs.clone(),
                limits: self.env.limits,
            }),
        }
    }

    /// This guest with another egress gate (changed grants, credentials or budgets): image,
    /// name, cache, configuration and log budget are shared; the connection pool is new, so
    /// no connection opened under the old grants is reused.
    pub fn with_egress(&self, egress: Arc<EgressGate>) -> Guest {
        Guest {
            image: self.image.clone(),
            env: Arc::new(GuestEnv {
                caller: self.env.caller.clone(),
                connections: egress.connections(),
                egress,
                cache: self.env.cache.clone(),
                cloud_config: self.env.cloud_config.clone(),
                node_metadata: self.env.node_metadata.clone(),
                logs: self.env.logs.clone(),
                limits: self.env.limits,
            }),
        }
    }

    /// This guest running `image`, the same component loaded into another engine (other
    /// memory or concurrency limits): name, cache, egress, connections, limits and log
    /// budget are shared.
    pub fn on_image(&self, image: Image) -> Guest {
        Guest {
            image,
            env: self.env.clone(),
        }
    }

    /// This guest with other call limits (timeout, answer size, cache size, log budget):
    /// image, name, cache contents, egress and connections are shared; the log rate starts
    /// afresh at the new budget.
    pub fn with_limits(&self, limits: CallLimits) -> Guest {
        Guest {
            image: self.image.clone(),
            env: Arc::new(GuestEnv {
                caller: self.env.caller.clone(),
                egress: self.env.egress.clone(),
                connections: self.env.connections.clone(),
                cache: self.env.cache.clone(),
                cloud_config: self.env.cloud_config.clone(),
                node_metadata: self.env.node_metadata.clone(),
                logs: ProviderLogs::default(),
                limits,
            }),
        }
    }

    fn new_store(&self) -> Store<CallState> {
        let sandbox = &self.image.sandbox;
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        let state = CallState {
            wasi,
            table: http_budget::table(&self.env.limits.http),
            http_in_flight: http_budget::InFlight::default(),
            http: WasiHttpCtx::new(),
            hooks: self
                .env
                .egress
                .hooks(self.env.caller.clone(), self.env.connections.clone()),
            limiter: MemoryCap {
                limit: usize::try_from(sandbox.config.memory_limit).unwrap_or(usize::MAX),
                used: 0,
                exceeded: false,
            },
            env: self.env.clone(),
            stdout,
            stderr,
            host: host::HostState::new(&self.env.limits, sandbox.metrics.clone()),
        };
        let mut store = Store::new(&sandbox.engine, state);
        store.limiter(|state| &mut state.limiter);
        // Guest code checks the epoch as it runs: at every tick it gives its tokio worker
        // back (tokio's `yield_now` lets I/O and other tasks run first), and past the
        // call's deadline it traps. A call that never computes for a whole tick never
        // reaches this callback, so it costs the trivial call nothing.
        let deadline = Instant::now() + self.env.limits.call_timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        store
    }

    /// Run `function` with `args` in a fresh instance under the call's limits.
    ///
    /// This is the one call path of every contract function. The call takes one of
    /// `--max-concurrent-calls`, plus one per [`GUEST_BYTES_PER_SLOT`] of node data it
    /// carries, so calls passing thousands of nodes stay few at a time; its arguments are
    /// lowered only once it has its slots, so waiting calls hold no copies.
    ///
    /// The future is boxed: callers hold a plain `dyn Future + Send` instead of one whose
    /// type names the lowered arguments' lifetimes, which rustc cannot yet prove `Send` for
    /// every lifetime when controllers spawn it (rust-lang/rust#110338).
    pub fn call<'a, A: Args + 'a, T: Answer>(
        &'a self,
        function: c::Function,
        args: A,
    ) -> Pin<Box<dyn Future<Output = Called<T>> + Send + 'a>> {
        Box::pin(self.run(function, args))
    }

    async fn run<A: Args, T: Answer>(&self, function: c::Function, args: A) -> Called<T> {
        let sandbox = &self.image.sandbox;
        let keys = self.env.node_metadata.as_ref();
        let weight =
            1 + u32::try_from(args.node_bytes(keys) / GUEST_BYTES_PER_SLOT).unwrap_or(u32::MAX);
        let _slot = sandbox
            .slots
            .acquire_many(weight.min(sandbox.config.max_concurrent_calls))
            .await
            .map_err(|_| CallFailure::Instantiate {
                message: "the sandbox is shutting down".into(),
            })?;
        let mut store = self.new_store();
        let export =
            args.export(&self.image.exports, function)
                .ok_or_else(|| CallFailure::Instantiate {
                    message: format!("the component has no node-set form of `{function}`"),
                })?;
        let params = args
            .lower(keys, &mut store.data_mut().table)
            .map_err(|err| CallFailure::Instantiate {
                message: format!("cannot lend the arguments: {err:#}"),
            })?;
        let mut instantiated = false;
        let run = async {
            let instance = self.image.pre.instantiate_async(&mut store).await?;
            instantiated = true;
            let func = exported::<_, A::Lowered<'_>, (T::Lifted,)>(&instance, &mut store, export)?;
            Ok::<T::Lifted, wasmtime::Error>(func.call_async(&mut store, params).await?.0)
        };
        let timeout = self.env.limits.call_timeout;
        let outcome = tokio::time::timeout(timeout, run).await;
        host::finish_call(store.data_mut());
        let state = store.data();
        let denials = state.hooks.denials();
        let hints = state.hooks.hints();
        let limit_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let lifted = match outcome {
            Err(_elapsed) => return Err(CallFailure::Deadline { limit_ms }),
            Ok(Ok(lifted)) => lifted,
            Ok(Err(_)) if state.limiter.exceeded => {
                return Err(CallFailure::MemoryLimit {
                    limit_bytes: sandbox.config.memory_limit,
                });
            }
            Ok(Err(err)) if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                return Err(CallFailure::Deadline { limit_ms });
            }
            // A start function that traps says so in the guest's own names (its name
            // section): bounded as an error message.
            Ok(Err(err)) if !instantiated => {
                return Err(CallFailure::Instantiate {
                    message: bounds::message(failure_reason(&err)),
                });
            }
            Ok(Err(err)) => {
                if let Some(budget) = http_budget::exceeded(&err, &self.env.limits.http) {
                    return Err(CallFailure::HttpBudget { budget });
                }
                let reason = failure_reason(&err);
                return Err(CallFailure::Trap {
                    message: trap_message(&reason, &state.stderr.contents()),
                });
            }
        };
        let value = T::from_guest(lifted);
        let bytes = match &value {
            Ok(answer) => answer.bytes(),
            Err(
                CloudError::NotFound { message }
                | CloudError::RetryAfter { message, .. }
                | CloudError::Other { message },
            ) => text::escaped_len(message),
            Err(CloudError::NotImplemented | CloudError::ImplementedElsewhere) => 0,
        };
        let limit = self.env.limits.max_result_bytes;
        if bytes as u64 > limit {
            return Err(CallFailure::ResultTooLarge {
                bytes: bytes as u64,
                limit_bytes: limit,
            });
        }
        Ok(Finished {
            value: value.map_err(bounded_error),
            denials,
            hints,
        })
    }
}

/// `error` as the host keeps it: its message escaped and cut ([`bounds::message`]) and its
/// delay clamped ([`bounds::retry_delay`]), so no log line, event, condition or timer sees
/// more of either than the bounds allow.
fn bounded_error(error: CloudError) -> CloudError {
    match error {
        CloudError::NotFound { message } => CloudError::NotFound {
            message: bounds::message(message),
        },
        CloudError::RetryAfter { delay_ms, message } => CloudError::RetryAfter {
            delay_ms: bounds::retry_delay(delay_ms).as_millis() as u64,
            message: bounds::message(message),
        },
        CloudError::Other { message } => CloudError::Other {
            message: bounds::message(message),
        },
        other => other,
    }
}

/// Why a started call failed: a wasm trap by its name; any other error (the host's bindings
/// refusing a resource drop, say) by every cause in its chain. wasmtime's backtrace context
/// ("error while executing at wasm backtrace:" and the frames) is left out: its first line
/// alone was all that once reached the message, hiding the cause. At most
/// [`MAX_FAILURE_REASON`] bytes: a cause may quote what the guest handed the host.
fn failure_reason(err: &wasmtime::Error) -> String {
    text::ellipsized(failure_causes(err), MAX_FAILURE_REASON)
}

/// The most of a failure's reason kept in its message (the guest's stderr is bounded apart).
const MAX_FAILURE_REASON: usize = 1024;

fn failure_causes(err: &wasmtime::Error) -> String {
    if let Some(trap) = err.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    let backtrace = err
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(ToString::to_string);
    let causes: Vec<String> = err
        .chain()
        .map(ToString::to_string)
        .filter(|cause| Some(cause) != backtrace.as_ref())
        .collect();
    if causes.is_empty() {
        format!("{err:#}")
    } else {
        causes.join(": ")
    }
}

/// The trap reason plus the guest's last words on stderr (a Rust panic message lands there),
/// escaped and cut as an error message is ([`bounds::message`]).
fn trap_message(reason: &str, stderr: &[u8]) -> String {
    bounds::message(unescaped_trap_message(reason, stderr))
}

fn unescaped_trap_message(reason: &str, stderr: &[u8]) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let last: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    match last.len() {
        0 => reason.to_string(),
        n => format!(
            "{reason}; guest stderr: {}",
            last[n.saturating_sub(3)..].join(" | ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load waits while another compilation holds the process's one slot, and goes on
    /// once it is free.
    #[tokio::test]
    async fn compilations_take_turns() {
        let sandbox = Sandbox::new(SandboxConfig::default(), Arc::default()).unwrap();
        let held = COMPILES.acquire().await.unwrap();
        let load = tokio::spawn(async move {
            sandbox
                .load(Arc::from(&b"not a component"[..]), "waiting.wasm")
                .await
                .err()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!load.is_finished(), "waits for the slot");
        drop(held);
        let refused = load.await.unwrap();
        assert!(
            matches!(refused, Some(LoadError::Invalid { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_failure_reason_keeps_every_cause_within_its_bound() {
        let err = wasmtime::Error::msg("resource has children").context("the call failed");
        assert_eq!(
            failure_reason(&err),
            "the call failed: resource has children"
        );
        let long = wasmtime::Error::msg("x".repeat(10 * MAX_FAILURE_REASON));
        let reason = failure_reason(&long);
        assert_eq!(reason.len(), MAX_FAILURE_REASON);
        assert!(reason.ends_with("..."), "{reason}");
    }
}
