"""The one retry policy of every request h5lens sends to storage.

A request that fails in a way another attempt may get past (throttling, a server error,
a dropped connection, a response cut off mid-stream) is sent again after a backoff that
doubles up to a cap; anything else fails at once. obstore retries inside its Rust client
(:meth:`RetryPolicy.obstore_config` hands it these numbers); requests through fsspec are
retried here (:meth:`RetryPolicy.run`), the failure classified by exception type and
HTTP status (:func:`h5lens.fetch.backend_errors.is_transient`). Either way a request makes at
most ``attempts`` attempts (a range of a batched obstore call that failed, one more, alone,
to find which range it was: :meth:`~h5lens.fetch.obstore_client.ObstoreClient.get_many`), and a
total outage ends in a few seconds with an error that names the URL and the bytes.

An endpoint that has never answered a client is given less patience: a request it cannot
even be connected to makes ``unanswered_attempts`` attempts (a mistyped endpoint, a server
that is down: a ``StorageError`` within seconds, not after the whole backoff), and obstore's
first request to an object goes through the probe policy (:data:`PROBE`).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from h5lens.fetch.backend_errors import PROBE_ATTEMPTS

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed request is sent again."""

    attempts: int = 8  # in all, the first included: at 20% failures, 1 request in 400,000 fails them all
    first_backoff: float = 0.1  # seconds before the second attempt
    max_backoff: float = 2.0  # the backoff doubles up to this
    deadline: float = 60.0  # seconds after which a request is not retried again
    # attempts, in all, at a request whose endpoint could not be connected to, while the
    # client has had no answer from it (``unanswered`` in :meth:`run`)
    unanswered_attempts: int = PROBE_ATTEMPTS

    def delays(self) -> list[float]:
        """The backoff before each attempt after the first."""
        return [min(self.max_backoff, self.first_backoff * 2**i) for i in range(max(0, self.attempts - 1))]

    def obstore_config(self) -> dict[str, Any]:
        """obstore's ``retry_config`` with these numbers."""
        return {
            "max_retries": max(0, self.attempts - 1),
            "backoff": {
                "init_backoff": datetime.timedelta(seconds=self.first_backoff),
                "max_backoff": datetime.timedelta(seconds=self.max_backoff),
                "base": 2.0,
            },
            "retry_timeout": datetime.timedelta(seconds=self.deadline),
        }

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        transient: Callable[[BaseException], bool],
        *,
        unanswered: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """``attempt()`` until it succeeds, fails in a way ``transient`` rejects, or the
        attempts or the deadline run out; a failure ``unanswered`` recognises (no connection
        to an endpoint that has not answered yet) gets ``unanswered_attempts`` at most. The
        last failure is raised with ``attempts`` (how many were made) set on it."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline
        made = 0
        while True:
            made += 1
            try:
                return await attempt()
            except Exception as e:
                wait = self._backoff(made, e, loop.time(), give_up, transient, unanswered)
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    def run_sync(
        self,
        attempt: Callable[[], T],
        transient: Callable[[BaseException], bool],
        *,
        unanswered: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """:meth:`run` for a synchronous ``attempt`` (a blocking call)."""
        give_up = time.monotonic() + self.deadline
        made = 0
        while True:
            made += 1
            try:
                return attempt()
            except Exception as e:
                wait = self._backoff(made, e, time.monotonic(), give_up, transient, unanswered)
                if wait is None:
                    raise
                time.sleep(wait)

    def _backoff(
        self,
        made: int,
        error: Exception,
        now: float,
        give_up: float,
        transient: Callable[[BaseException], bool],
        unanswered: Callable[[BaseException], bool] | None,
    ) -> float | None:
        """Seconds to wait before the next attempt, or None (``error`` is the last: its
        ``attempts`` set) when it is not transient or the attempts or the deadline are spent."""
        delays = self.delays()
        spent = made > len(delays) or (
            unanswered is not None and made >= self.unanswered_attempts and unanswered(error)
        )
        if spent or not transient(error) or now + delays[made - 1] > give_up:
            error.attempts = made  # type: ignore[attr-defined]  # said in the error's message
            return None
        return delays[made - 1]


POLICY = RetryPolicy()
# The first request to an object through obstore, and every probe (is the file there: its size
# and ETag): an endpoint that does not answer is reported within seconds. obstore's failures
# carry no type that says "no connection", so its first request gets these attempts whatever
# the failure; in auto mode a failure then goes on through fsspec (see :mod:`h5lens.fetch.obstore_client`).
PROBE = RetryPolicy(attempts=PROBE_ATTEMPTS, first_backoff=0.1, max_backoff=0.4, deadline=20.0)


def policy() -> RetryPolicy:
    """The policy in force (``h5lens.fetch.retry.POLICY``; a test or a caller may set a stricter one)."""
    return POLICY


__all__ = ["POLICY", "PROBE", "RetryPolicy", "policy"]
