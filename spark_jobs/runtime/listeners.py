"""A base for listeners that only want each micro-batch's progress."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


class ProgressListener(StreamingQueryListener):
    """Spark calls every hook of a Python listener (a missing one fails in the listener bus):
    the others do nothing here, subclasses implement ``onQueryProgress``."""

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None
