"""Where a read plan's decoding runs once its bytes are in: on the event loop, or on threads.

One small read decodes best on the event loop itself: a hop to a thread costs more (~100 µs)
than its decoding, and a lazy AnnData makes dozens of such reads. But a minibatch loader
(annbatch) sends hundreds of small reads in one event-loop turn (256 blocks of `data` and
`indices` per preload), and decoded one after the other on the loop they keep one core
busy while the other waits. So the decodings asked for in one turn are taken together, by
the kernel's one policy (:mod:`h5lens.engine.kernel`): fewer stored bytes in all than its
threshold, they run on the loop as before; more, they are shared out between its threads
in one hop each (and a plan among them shares its own chunks out further, on the same
threads), and each read resumes with its own result.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from h5lens.engine.kernel import THREADS, decodes_here, pool


@dataclass
class _Job:
    nbytes: int
    work: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]


@dataclass
class _Turn:
    jobs: list[_Job] = field(default_factory=list)


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = weakref.WeakKeyDictionary()


async def off_loop(nbytes: int, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)``, decoding ``nbytes`` stored bytes: with the other decodings asked for
    in this event-loop turn, on the loop if they are few bytes in all, else on the threads."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = _Turn()
        loop.call_soon(_flush, loop)  # after every read of this turn has asked
    turn.jobs.append(_Job(nbytes, work, args, future))
    return await future


def _flush(loop: asyncio.AbstractEventLoop) -> None:
    turn = _turns.pop(loop, None)
    if turn is None or not turn.jobs:
        return
    if decodes_here(sum(job.nbytes for job in turn.jobs)):
        for job in turn.jobs:
            _settle(job, *_run(job))
        return
    for group in _share(turn.jobs, THREADS):  # each job resumes its reader on the loop as it ends
        pool().submit(lambda jobs: [loop.call_soon_threadsafe(_settle, job, *_run(job)) for job in jobs], group)


def _share(jobs: list[_Job], count: int) -> list[list[_Job]]:
    """Jobs shared out into at most ``count`` groups of about equal bytes (biggest first)."""
    groups: list[list[_Job]] = [[] for _ in range(min(count, len(jobs)))]
    loads = [0] * len(groups)
    for job in sorted(jobs, key=lambda j: -j.nbytes):
        lightest = loads.index(min(loads))
        groups[lightest].append(job)
        loads[lightest] += job.nbytes
    return groups


def _run(job: _Job) -> tuple[bool, Any]:
    if job.future.done():  # its reader was cancelled
        return True, None
    try:
        return True, job.work(*job.args)
    except BaseException as e:  # noqa: BLE001 - handed to the job's own reader
        return False, e


def _settle(job: _Job, ok: bool, value: Any) -> None:
    if job.future.done():
        return
    if ok:
        job.future.set_result(value)
    else:
        job.future.set_exception(value)
