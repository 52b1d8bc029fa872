"""Spark JVMs of a test run compile with C1 only when ``FEDLOAD_SPARK_QUICK_JIT`` is set; options
given are kept and the flag is added once."""

from __future__ import annotations

import pytest

from app.java import QUICK_JIT_ENV, QUICK_JIT_OPTION, with_quick_jit

DRIVER, EXECUTOR = "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"


def test_unset_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(QUICK_JIT_ENV, raising=False)
    conf = {DRIVER: "-Dx=1"}
    assert with_quick_jit(conf) == {DRIVER: "-Dx=1"}


def test_set_adds_c1_only_to_driver_and_executors_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(QUICK_JIT_ENV, "1")
    conf = {DRIVER: "-Dx=1 -XX:+ExitOnOutOfMemoryError", "spark.driver.memory": "2g"}
    quick = with_quick_jit(conf)
    assert quick == {
        DRIVER: f"-Dx=1 -XX:+ExitOnOutOfMemoryError {QUICK_JIT_OPTION}",
        EXECUTOR: QUICK_JIT_OPTION,
        "spark.driver.memory": "2g",
    }
    assert with_quick_jit(quick) == quick
    assert conf[DRIVER] == "-Dx=1 -XX:+ExitOnOutOfMemoryError"  # the caller's dict is not changed
