"""What the host offers besides `wasi:http`: the log (`log`, `info`, `warn`...), the cloud
configuration given to `init` (`cloud_config`, `cloud_config_json`) and the key-value
cache shared by the calls of one provider version (`cache_get`, `cache_set`, `cache_delete`
and their JSON forms)."""

import json
from typing import Any, Optional

from wit_world.imports import host
from wit_world.imports.host import LogLevel

from . import errors


def log(level: LogLevel, message: str) -> None:
    """Write a log line; the host tags it with the provider's name and version."""
    host.log(level, message)


def debug(message: str) -> None:
    host.log(LogLevel.DEBUG, message)


def info(message: str) -> None:
    host.log(LogLevel.INFO, message)


def warn(message: str) -> None:
    host.log(LogLevel.WARN, message)


def error(message: str) -> None:
    host.log(LogLevel.ERROR, message)


def cloud_config() -> Optional[bytes]:
    """The bytes of `--cloud-config`, if given."""
    return host.cloud_config()


def parse_json_config(raw: Optional[bytes]) -> dict:
    """Configuration bytes as a JSON object; none gives `{}`. Anything else is an `other`
    error saying what is wrong with the cloud config."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise errors.other(f"invalid cloud config: {err}")
    if not isinstance(value, dict):
        raise errors.other(
            f"invalid cloud config: expected a JSON object, got {type(value).__name__}"
        )
    return value


def cloud_config_json() -> dict:
    """This provider version's configuration as a JSON object (`{}` when none was given)."""
    return parse_json_config(cloud_config())


def cache_get(key: str) -> Optional[bytes]:
    """The value stored under `key`, if it has not expired."""
    return host.cache_get(key)


def cache_set(key: str, value: bytes, ttl_seconds: float) -> None:
    """Store `value` under `key` for `ttl_seconds` (the host may cap it or evict early)."""
    host.cache_set(key, value, max(0, int(ttl_seconds * 1000)))


def cache_delete(key: str) -> None:
    """Forget `key`."""
    host.cache_delete(key)


def cache_get_json(key: str) -> Optional[Any]:
    """The value under `key` decoded from JSON; one that no longer decodes counts as absent."""
    raw = host.cache_get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def cache_set_json(key: str, value: Any, ttl_seconds: float) -> None:
    """Store `value` as JSON under `key` for `ttl_seconds`."""
    cache_set(key, json.dumps(value, separators=(",", ":")).encode("utf-8"), ttl_seconds)
