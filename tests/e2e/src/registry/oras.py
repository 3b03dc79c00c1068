"""ORAS's Python SDK (PyPI `oras`) as the e2e tests' independent OCI client.

One command per run: its arguments are one JSON object in argv[1], its result is JSON on
stdout; a failure is a traceback on stderr and a non-zero exit. Run by `Oras` in
tests/e2e/src/registry.rs with the interpreter of the venv `make test` installs.
"""

import json
import sys

import oras.provider

# oras-py retries every request that raises five times, sleeping 3 s to 83 s in between
# (`oras.decorator.retry`), even for "Cannot respond to request for authentication": a test
# wants the first answer.
oras.provider.Registry.do_request = oras.provider.Registry.do_request.__wrapped__


def main():
    args = json.loads(sys.argv[1])
    docker_config = args.get("docker_config")
    # The default "token" backend reads a `Basic realm=...` challenge as a token service and
    # fails; Debian's registry with htpasswd wants plain basic auth.
    client = oras.provider.Registry(
        hostname=args["registry"],
        insecure=True,
        auth_backend="basic" if docker_config else "token",
    )
    reference = args["reference"]
    if docker_config:
        # The auth backend cannot parse a reference string (it has no `hostname`).
        client.auth.load_configs(client.get_container(reference), configs=[docker_config])

    command = args["command"]
    if command == "push":
        response = client.push(
            target=reference,
            files=[f"{args['file']}:{args['layer_media_type']}"],
            # A config path that does not exist silently becomes an empty `{}` config.
            manifest_config=f"{args['config']}:{args['config_media_type']}",
            disable_path_validation=True,
            quiet=True,
        )
        result = response.headers["Docker-Content-Digest"]
    elif command == "manifest":
        result = client.get_manifest(reference)
    elif command == "pull":
        result = client.pull(target=reference, outdir=args["dir"])
    else:
        raise ValueError(f"unknown command {command!r}")
    json.dump(result, sys.stdout)


main()
