# The two entry points a newcomer needs. Both install what they need first.
#   make test   - build every guest from source and run all tests (what CI runs)
#   make demo   - the manager on API emulator + two cloud simulators, two providers side by side,
#                 swapping simcloud v1 -> v2
#                 live, until Ctrl-C (make demo ARGS="--exit-after 30" for scripts)

CARGO ?= cargo

.PHONY: setup demo test fuzz docs bench bench-scale fmt lint release release-prepare release-check
.PHONY: release-tools

# The wasm target; the programs the tests run (docker-registry, htpasswd, umoci, skopeo from
# Debian; the Python tools of tests/python-tools.txt, cargo-nextest among them, and the node
# packages that build TypeScript providers, in target/test-tools): see
# tests/install-test-tools.sh; helm: see tests/install-chart-tools.sh.
setup:
	rustup target add wasm32-wasip2
	rustup component add rustfmt clippy
	bash tests/install-test-tools.sh
	bash tests/install-chart-tools.sh

# The demo runs from the build `make test` makes (the same command nextest builds with, the
# same lints, the same features), so neither target builds the workspace again after the
# other; the first build on 2 cores takes about 15 minutes.
demo: setup
	$(TEST_BUILD)
	target/debug/demo $(ARGS)

# Clippy with warnings as errors, on the host side (host, manager, tests, benches, the aws
# guest's native unit tests) and on every guest built for wasm32.
define CLIPPY
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --target wasm32-wasip2 -p wasm-ccm-sdk -p simcloud -p aws -p hostile -p overreach -p rollout -p legacy -- -D warnings
endef

# `make test` runs the same lints inside its build: cargo hands the workspace's own crates
# to clippy-driver (rustc with clippy's lints; CLIPPY_ARGS is how `cargo clippy` gives it
# `-D warnings`) and builds the dependencies with plain rustc, so linting costs no second
# build of every dependency (a separate `cargo clippy` is a check build of all of them: 5-8
# min on 2 cores). The wasm32 guests are linted the same way in their build, which
# tests/guest-builds runs with this environment; what the tests build by typing the docs
# (a scaffolded provider) is too.
LINTED = RUSTC_WORKSPACE_WRAPPER="$$(rustc --print sysroot)/bin/clippy-driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# cargo-nextest (installed by setup) runs every test of the workspace in a process of its
# own, test binaries side by side (.config/nextest.toml); the aws guest's unit tests (recorded
# AWS answers moto cannot give) run natively with them. Doc tests are cargo's own (built with
# the same environment, so nothing is rebuilt for them). Formatting is checked first: seconds,
# and a misformatted tree fails before anything is built.
NEXTEST = target/test-tools/python/bin/cargo-nextest nextest

# What `make test` builds (nextest builds with `cargo test --no-run` and these options).
TEST_BUILD = $(LINTED) $(CARGO) test --locked --workspace --no-run

# The workspace's native crates (the guests are built for wasm32 by tests/guest-builds):
# the doc tests and the docs book build them with the features `make test`'s build resolved,
# so nothing is built again.
NATIVE := -p wasm-ccm-host -p wasm-ccm -p wasm-ccm-sdk -p cloud-sim -p guest-builds -p e2e \
	-p kube-emulator -p docs-book

test: setup
	$(CARGO) fmt --all --check
	$(LINTED) $(NEXTEST) run --locked --workspace
	$(LINTED) $(CARGO) test --locked --doc $(NATIVE)

# The property tests of what a provider may answer (tests/e2e/tests/answers_fuzz.rs), with
# many more cases than `make test` runs (32 of each): FUZZ_CASES=100000 for a night's run.
FUZZ_CASES ?= 2000
fuzz: setup
	PROPTEST_CASES=$(FUZZ_CASES) $(LINTED) $(NEXTEST) run --locked --workspace -E 'test(answers_fuzz)' --no-capture

# The docs book (docs/, built by the mdbook program setup installs) into target/book, its
# links and anchors checked (and the README's links into it): open target/book/index.html.
# Built with every native crate selected (`$(NATIVE)`), not `-p docs-book` alone: cargo then
# resolves features as the test build does and reuses what it built (`-p docs-book` alone
# rebuilds crates, which once took CI's test of this over 5 min).
docs:
	$(CARGO) build --locked $(NATIVE) --bin docs-book
	target/debug/docs-book docs target/book

# Benchmarks are release builds (one for both targets), linted as every other build so the
# guests they run are the ones `make test` built (target/guests), not built again.
bench: setup
	$(LINTED) $(CARGO) bench --locked -p e2e --bench sandbox
	$(LINTED) $(CARGO) bench --locked -p e2e --bench languages

# The controller-manager at scale (SCALE_NODES, SCALE_SERVICES, SCALE_LATENCY_MS).
bench-scale: setup
	$(LINTED) $(CARGO) bench --locked -p e2e --bench scale

fmt:
	$(CARGO) fmt --all

lint: setup
	$(CLIPPY)

# Releases (docs/src/contributing/releasing.md). release-prepare sets VERSION everywhere it is
# written, moves the changelog's [Unreleased] under it, commits and tags vVERSION; release
# builds the manager for linux/amd64 and linux/arm64, their images under one index, the chart
# pinned to it by digest, pushes both to REGISTRY (HOST[:PORT][/PATH]) with the credentials
# of REGISTRY_CONFIG (a docker config JSON), signs them with SIGN_KEY and attaches the SBOM
# (RELEASE_ARGS=--insecure for a plain-HTTP registry);
# release-check runs the arm64 manager under qemu against the cloud simulator.
release-prepare:
	release/release.sh prepare $(VERSION)

release: setup release-tools
	release/release.sh publish $(VERSION) $(REGISTRY) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY)) \
		$(if $(REGISTRY_CONFIG),--registry-config $(REGISTRY_CONFIG)) $(RELEASE_ARGS)

release-check: setup release-tools
	release/release.sh check

release-tools:
	bash release/install-release-tools.sh
