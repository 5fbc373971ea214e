"""Every exception rtgate raises, in one place.

::

    RtgateError
    ├── InvalidRequest          bad input from a caller (ValueError too)
    │   ├── InvalidBudget       budget_ms not a finite number in range
    │   └── KeyLimitExceeded    a request asks for more than its API key allows
    ├── Declined                a tier has no answer for this request (a miss, not a fault)
    ├── BackendError            a model backend failed
    │   ├── BackendUnavailable  cannot connect, circuit open, server 5xx
    │   ├── RateLimited         the backend said 429
    │   └── BackendProtocolError malformed response or stream
    ├── QueueFull               a bounded queue refused an item (policy: reject the newcomer)
    ├── Overloaded              the server cannot answer within the budget now (retry later)
    ├── JobNotFound             no delegated job with that id
    ├── ConfigError             a configuration file or value is wrong
    │   └── ModelNotFound       model weights not installed (FileNotFoundError too)
    ├── ApiError                an HTTP refusal with its own status and code (server)
    └── ClientGone              the HTTP client left first; its work was cancelled (server)
"""

from __future__ import annotations

__all__ = [
    "ApiError",
    "BackendError",
    "BackendProtocolError",
    "BackendUnavailable",
    "ClientGone",
    "ConfigError",
    "Declined",
    "InvalidBudget",
    "InvalidRequest",
    "JobNotFound",
    "KeyLimitExceeded",
    "ModelNotFound",
    "Overloaded",
    "QueueFull",
    "RateLimited",
    "RtgateError",
]


class RtgateError(Exception):
    """Base of every rtgate exception. ``code`` is a stable machine-readable name."""

    code = "rtgate_error"


class InvalidRequest(RtgateError, ValueError):
    code = "invalid_request"


class InvalidBudget(InvalidRequest):
    code = "invalid_budget"


class KeyLimitExceeded(InvalidRequest):
    """A request asks for more than its API key allows (budget or tokens)."""

    code = "key_limit_exceeded"


class Declined(RtgateError):
    """Raised by a tier, before its first token, when it has nothing to say (a miss)."""

    code = "declined"


class NotYet(Declined):
    """A decline that asks the gate to wait: the input is still being written (a typed
    prefix, a partial transcript), and the tier cannot read it *yet*; the whole of it may
    well be answerable fast. The gate does not send such an input to the big model on
    this decline (nothing answered and a tier said "not yet": silent, no job); the caller
    asks again with the whole input, where the same tier declines for good."""

    code = "not_yet"


class BackendError(RtgateError):
    code = "backend_error"


class BackendUnavailable(BackendError):
    code = "backend_unavailable"


class RateLimited(BackendError):
    code = "rate_limited"


class BackendProtocolError(BackendError):
    code = "backend_protocol_error"


class QueueFull(RtgateError):
    code = "queue_full"


class JobNotFound(RtgateError, KeyError):
    code = "job_not_found"


class ConfigError(RtgateError, ValueError):
    code = "config_error"


class Overloaded(RtgateError):
    """Answered at once instead of late: too many requests in flight, or the request's
    budget was spent waiting for the server (``retry_after_s`` says when to try again)."""

    code = "overloaded"

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelNotFound(ConfigError, FileNotFoundError):
    """The weights are not installed (or a user path does not exist)."""

    code = "model_not_found"


class ApiError(RtgateError):
    """An HTTP error with its own ``status`` and a stable ``code``; raise it from any
    endpoint. The instance's ``code`` is the one sent, the class's is only a default."""

    code = "api_error"

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param


class ClientGone(RtgateError):
    """The client disconnected before the answer was ready; the work was cancelled."""

    code = "client_gone"
