# The two entry points a newcomer needs. Both install what they need first.
#   make test   - build every guest from source and run all tests (what CI runs)
#   make demo   - the manager on its embedded default (arrives with the controller-manager)

CARGO ?= cargo

.PHONY: setup test bench fmt lint

setup:
	rustup target add wasm32-wasip2

test: setup
	$(CARGO) test --locked

bench: setup
	$(CARGO) bench --locked -p e2e --bench sandbox

fmt:
	$(CARGO) fmt --all

lint: setup
	$(CARGO) clippy --locked --all-targets
	$(CARGO) clippy --locked --target wasm32-wasip2 -p wasm-ccm-sdk -p simcloud -p hostile -p overreach
