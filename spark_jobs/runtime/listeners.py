"""A base for listeners that only want each micro-batch's progress, and a book of it.

Why not PySpark's own listener wrapper: it converts every event object field by field over
Py4J, and each Java map it walks ends in a ``NoSuchElementException`` that PySpark's error
conversion tests against a dozen exception classes, each a ``Class.forName`` in the JVM. Profiled
in an agent of the tentative scenario (JFR and py-spy, session 28): 40-49% of the agent's JVM CPU
and a fifth of its Python process went to that. Here the progress crosses as the one JSON
document Spark already writes for it (two Py4J calls), and the other events not at all.

The same holds for ``StreamingQuery.recentProgress``: it serialises all of the last 100 reports
(three Py4J calls each), and the DPC poll asked for it five times a second. ``ProgressBook``
keeps what the listener delivered instead, so asking costs nothing.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import QueryProgressEvent, StreamingQueryProgress

# Spark's own default (spark.sql.streaming.numRecentProgressUpdates).
KEPT_PER_RUN = 100


class _ProgressCallback:
    """The Py4J side of a ``ProgressListener``: Spark's listener bus calls it for every event;
    only progress is handed on, parsed from its JSON."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        return None

    def onQueryProgress(self, jevent: Any) -> None:
        document = json.loads(jevent.progress().json())
        self.listener.onQueryProgress(QueryProgressEvent.fromJson({"progress": document}))

    def onQueryIdle(self, jevent: Any) -> None:
        return None

    def onQueryTerminated(self, jevent: Any) -> None:
        return None

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressListener(StreamingQueryListener):
    """Subclasses implement ``onQueryProgress``; the other hooks are never called."""

    @property
    def _jlistener(self) -> Any:
        # PySpark's addListener/removeListener register this object: built once, so a removal
        # finds the wrapper the addition registered.
        from pyspark import SparkContext

        if getattr(self, "_jlistenerobj", None) is None:
            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is registered on a running SparkContext"
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_ProgressCallback(self))
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None


class ProgressBook:
    """The last progress reports of every query run, as the listener bus delivered them (a
    moment after the batch: the bus is asynchronous). Keyed by run id: a query restarted from
    its checkpoint keeps its id, and its earlier run's batches are no measure of this one.
    Thread-safe: the bus writes, pollers read."""

    def __init__(self, keep: int = KEPT_PER_RUN) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._runs: dict[str, deque[StreamingQueryProgress]] = {}

    def record(self, progress: StreamingQueryProgress) -> None:
        with self._lock:
            kept = self._runs.setdefault(str(progress.runId), deque(maxlen=self._keep))
            kept.append(progress)

    def recent(self, run_id: str, last: int | None = None) -> list[StreamingQueryProgress]:
        """Oldest first, like ``StreamingQuery.recentProgress``; the ``last`` few if given."""
        with self._lock:
            kept = list(self._runs.get(run_id, ()))
        return kept if last is None else kept[-last:]

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
