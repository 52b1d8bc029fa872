"""Sinks of a participant's own work, written by the task's owner from its output log.

``writer`` follows a log and writes each final bucket once (``SinkWriter``, ``SinkWriters``:
the agent's hook); ``parquet`` and ``nats`` are the sinks a task's ``sink:`` names.
"""
