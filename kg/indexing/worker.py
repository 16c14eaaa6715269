"""A background thread that drains a durable SQL queue: run a pass, sleep when idle, wake on work.

Shared by the indexer (``index_jobs``) and the function job runner (``function_jobs``): the
queue itself lives in SQL (:mod:`kg.indexing.queue`), so a stopped or crashed thread loses nothing; this
class only decides when the next pass runs.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("kg.indexing.worker")


class PollingWorker:
    """Runs :meth:`pass_once` in a daemon thread until stopped.

    Subclasses implement :meth:`pass_once`, returning how much work the pass did; after a pass
    that did none, the thread sleeps ``poll_s`` seconds or until :meth:`wake`.

    Parameters
    ----------
    poll_s : float
        Idle sleep between passes, in seconds.
    thread_name : str
        Name of the thread (seen in logs and thread dumps).
    """

    def __init__(self, *, poll_s: float, thread_name: str) -> None:
        self.poll_s = poll_s
        self._thread_name = thread_name
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def pass_once(self) -> int:
        """One pass over the queue; the number of items done (0: idle)."""
        raise NotImplementedError

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the background thread; an item in flight is finished or left to its lease."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def close(self) -> None:
        """Stop the background thread and release what the worker holds (the process ends)."""
        self.stop()

    def wake(self) -> None:
        """Tell the background thread there is work."""
        self._wake.set()

    def idle_wait_s(self) -> float:
        """How long to sleep after a pass that did nothing (``poll_s``; a subclass may back off)."""
        return self.poll_s

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                done = self.pass_once()
            except Exception:  # keep the thread alive; the work stays in the queue
                log.exception("%s: pass failed", self._thread_name)
                done = 0
            if not done:
                self._wake.wait(self.idle_wait_s())
                self._wake.clear()
