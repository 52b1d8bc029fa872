"""Names of an active replica's copy (spark_jobs.runtime.active): the host's clean-up of
fragments hosted elsewhere must leave exactly these directories alone."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.active import active_consumer, active_name, is_active_copy


@pytest.mark.parametrize(
    ("directory", "copy"),
    [
        (active_name("O.x"), True),
        (f"{active_name('O.x')}.dpc", True),
        (f"{active_name('O.x')}.redo-12", True),
        ("O.x", False),
        ("O.active.x", False),  # a task that merely has the word in its name
        ("O.x.actives", False),
        ("active", False),
        ("O.x.active.spool", False),
    ],
)
def test_which_directories_belong_to_an_active_copy(directory: str, copy: bool) -> None:
    assert is_active_copy(directory) is copy


def test_the_copy_acknowledges_as_a_position_of_its_task() -> None:
    # The registry lets a runner acknowledge as <consumer>.<purpose>, never as another consumer.
    assert active_name("O.x") == "O.x.active"


def test_each_holders_copy_acknowledges_as_a_position_of_its_own() -> None:
    # Two holders sharing one position: the first to reconcile acknowledged past what the
    # second's redo had to re-read, and the producer trimmed it.
    assert active_consumer("O.x", "T") == "O.x.active.T"
    assert active_consumer("O.x", "T") != active_consumer("O.x", "U")
    # Still a position of the task's (the registry's <consumer>.<purpose> rule), and not a
    # directory name the host's clean-up would take for the copy's.
    assert active_consumer("O.x", "U").startswith("O.x.")
    assert not is_active_copy(active_consumer("O.x", "U"))
