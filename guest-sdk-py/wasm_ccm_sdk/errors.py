"""The contract's `provider-error`, raised from a provider function as componentize-py
expects (`Err(<variant>)`), and the conversion of unexpected Python exceptions into
`other` errors that name the exception and where it was raised."""

import traceback

from componentize_py_types import Err
from wit_world.imports import ccm_types


def not_found(message: str) -> Err:
    """The thing asked about definitely does not exist in the cloud."""
    return Err(ccm_types.ProviderError_NotFound(message))


def not_implemented() -> Err:
    """The provider does not implement this function."""
    return Err(ccm_types.ProviderError_NotImplemented())


def implemented_elsewhere() -> Err:
    """Another controller owns this load balancer."""
    return Err(ccm_types.ProviderError_ImplementedElsewhere())


def retry_after(delay_seconds: float, message: str) -> Err:
    """Not done yet: the host calls again after `delay_seconds` instead of backing off."""
    delay_ms = max(0, int(delay_seconds * 1000))
    return Err(ccm_types.ProviderError_RetryAfter(ccm_types.Retry(delay_ms, message)))


def other(message: str) -> Err:
    """Anything else that went wrong; the message says what."""
    return Err(ccm_types.ProviderError_Other(message))


def from_exception(function: str, error: BaseException) -> Err:
    """`error` as a contract error: an `Err` as it is, an SDK error by its own conversion
    (`to_provider_error`), any other exception as `other` naming its type, message and
    the provider line that raised it (a bug in the provider, which would otherwise trap
    with the cause lost)."""
    if isinstance(error, Err):
        return error
    convert = getattr(error, "to_provider_error", None)
    if callable(convert):
        return convert()
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return other(f"{function}: {type(error).__name__}: {error}{where}")
