"""Errors a caller can act on.

Services raise `ServiceError` with a sentence that names what is wrong; the web layer
turns it into the `success:false` envelope. Business failures (validation, conflicts,
unknown ids) are answered with HTTP 200 like the panels whose API we keep, so clients
that read only the envelope keep working; the few classes below carry a status where
HTTP has a word for the situation.
"""


class ServiceError(Exception):
    """A request that cannot be carried out, with a message for the person who sent it."""

    status = 200

    def __init__(self, msg: str):
        super().__init__(msg)
        self.msg = msg


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class Unavailable(ServiceError):
    """Refused by this instance until it is fixed, where another might answer."""

    status = 503


class TooManyRequests(ServiceError):
    """Refused for now; `retry_after` is how many seconds until it may be tried again."""

    status = 429

    def __init__(self, msg: str, retry_after: int):
        super().__init__(msg)
        self.retry_after = retry_after
