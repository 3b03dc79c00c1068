# The two entry points a newcomer needs. Both install what they need first.
#   make test   - build every guest from source and run all tests (what CI runs)
#   make demo   - the manager on API emulator + cloud simulator, swapping simcloud v1 -> v2
#                 live, until Ctrl-C (make demo ARGS="--exit-after 30" for scripts)

CARGO ?= cargo

.PHONY: setup demo test docs bench bench-scale fmt lint

# The wasm target; the programs the tests run (docker-registry, htpasswd, umoci, skopeo from
# Debian; the Python tools of tests/python-tools.txt, cargo-nextest among them, and the node
# packages that build TypeScript providers, in target/test-tools): see
# tests/install-test-tools.sh; helm: see tests/install-chart-tools.sh.
setup:
	rustup target add wasm32-wasip2
	rustup component add rustfmt clippy
	bash tests/install-test-tools.sh
	bash tests/install-chart-tools.sh

demo: setup
	$(CARGO) run --locked -p e2e --bin demo -- $(ARGS)

# Clippy with warnings as errors, on the host side (host, manager, tests, the aws guest's
# native unit tests) and on every guest built for wasm32, as the test build sees them.
define CLIPPY
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --target wasm32-wasip2 -p wasm-ccm-sdk -p simcloud -p aws -p hostile -p overreach -p rollout -p legacy -- -D warnings
endef

# cargo-nextest (installed by setup) runs every test of the workspace in a process of its
# own, test binaries side by side (.config/nextest.toml); the aws guest's unit tests (recorded
# AWS answers moto cannot give) run natively with them. Doc tests are cargo's own. Formatting
# is checked first (seconds: a misformatted tree fails before anything is built), then clippy
# (minutes: it checks, it does not build), then the tests.
NEXTEST = target/test-tools/python/bin/cargo-nextest nextest

test: setup
	$(CARGO) fmt --all --check
	$(CLIPPY)
	$(NEXTEST) run --locked --workspace
	$(CARGO) test --locked --doc

# The docs book (docs/, built by the mdbook program setup installs) into target/book, its
# links and anchors checked (and the README's links into it): open target/book/index.html.
# `--bin`, not `-p`: cargo then resolves features for the whole workspace, as the test build
# does, and reuses what it built (`-p docs-book` rebuilt crates, which once took CI's test of
# this over 5 min).
docs:
	$(CARGO) run --locked --bin docs-book -- docs target/book

bench: setup
	$(CARGO) bench --locked -p e2e --bench sandbox
	$(CARGO) bench --locked -p e2e --bench languages

# The controller-manager at scale (SCALE_NODES, SCALE_SERVICES, SCALE_LATENCY_MS).
bench-scale: setup
	$(CARGO) bench --locked -p e2e --bench scale

fmt:
	$(CARGO) fmt --all

lint: setup
	$(CLIPPY)
