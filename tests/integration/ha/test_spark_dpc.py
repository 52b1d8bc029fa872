"""DPC on a real Spark streaming query: tentative buckets after the delay budget, then
checkpoint/redo with Spark's own checkpoint, compared with a failure-free reference run.

The fragment is stateful (distinct ports per source and 4 s window) and reads two inputs over
Arrow Flight; input B's boundaries are withheld from bucket 4 on. Time is an injected clock (a
Flight stream's boundary) so the budget is exact and the test does not wait for it: what it
checks is which buckets go out tentatively at which clock value, and that after the heal the
stable output equals the reference, with each row once.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from app.availability.states import NodeState
from app.availability.sunion import DelayStrategy
from app.availability.tuples import Kind
from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.runtime import FragmentRuntime, StreamRef, publish
from spark_jobs.runtime.dpc import DPCFragment, DPCSettings, consumer_view
from spark_jobs.runtime.sunion import SUnionReader
from tests.integration.ha.spark_dpc_support import (
    FIRST,
    OTHER,
    SECONDS,
    X,
    ms,
    reference,
    spec,
    withheld_inputs,
)
from tests.integration.runtime.conftest import BUCKET, rows

WITHHELD_FROM = 4


def _reader(dpc_servers, settings: DPCSettings, schema: StructType = CONNECTION_SCHEMA, **extra):
    inputs = [
        {"location": dpc_servers["a"].location, "stream": "a"},
        {"location": dpc_servers["b"].location, "stream": "b"},
    ]
    options = {
        "inputs": json.dumps(inputs),
        "consumer": "frag",
        **settings.source_options(BUCKET),
        **extra,
    }
    return SUnionReader(options, schema)


@pytest.mark.parametrize("strategy", list(DelayStrategy))
def test_source_releases_by_the_delay_strategy_of_the_paper(dpc_servers, strategy):
    """Driven directly (no Spark): which offsets the source hands Spark at which clock value."""
    clock, a, b = withheld_inputs(dpc_servers, WITHHELD_FROM)
    settings = DPCSettings(
        X, strategy=strategy, clock=StreamRef(dpc_servers["home"].location, "clock")
    )
    budget = settings.delay_budget_ms
    withheld = FIRST + WITHHELD_FROM
    r = _reader(dpc_servers, settings, start_bucket=str(FIRST))
    try:
        start = r.initialOffset()
        clock.advance("clock", ms(withheld))
        end = r.latestOffset(start, None)
        assert end == {"bucket": withheld}, "stable buckets go at once, without the budget"
        clock.advance("clock", ms(withheld + 1) + budget - 1)
        assert r.latestOffset(end, None) == end, "within the budget nothing is released"
        clock.advance("clock", ms(withheld + 1) + budget)
        first_tentative = r.latestOffset(end, None)
        # DELAY_EACH: bucket 4 only (5's own budget has not passed). DELAY_FIRST: once the
        # failure has cost its first delay, every bucket that has ended on the clock goes too
        # (now = end of 5 + 2.7 s, so 5 and 6), none that has not.
        clock_now = ms(withheld + 1) + budget
        ended = clock_now // ms(1)
        if strategy is DelayStrategy.DELAY_EACH:
            assert first_tentative == {"bucket": withheld + 1, "tentative_from": withheld}
        else:
            assert first_tentative == {"bucket": ended, "tentative_from": withheld}
        clock.advance("clock", clock_now + ms(1))
        following = r.latestOffset(first_tentative, None)
        assert following["tentative_from"] == first_tentative["bucket"]
        if strategy is DelayStrategy.DELAY_EACH:
            assert following["bucket"] == withheld + 2
        else:
            assert following["bucket"] == ended + 1
        # Healed: the now-stable buckets wait for the redo, unless their deadline passes first.
        publish(b, "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)
        assert r.latestOffset(following, None) == following
        waiting = following["bucket"]
        clock.advance("clock", ms(waiting + 1) + budget)
        assert r.latestOffset(following, None)["bucket"] == waiting + 1
        # Producers keep every bucket from the first tentative one: the redo reads them again.
        r.commit(following)
        assert a.info("a")["acks"] == {"frag": withheld}
    finally:
        r.stop()
        for client in (clock, a, b):
            client.close()


def test_redo_source_releases_stable_buckets_only_while_its_file_exists(dpc_servers, tmp_path):
    """A redo copy's source (option ``stable_only_file``) waits for a late input however long,
    then behaves as the serving query's once the file is gone (the switch removes it)."""
    clock, a, b = withheld_inputs(dpc_servers, WITHHELD_FROM)
    settings = DPCSettings(X, clock=StreamRef(dpc_servers["home"].location, "clock"))
    withheld = FIRST + WITHHELD_FROM
    stable_only = tmp_path / "stable-only"
    stable_only.touch()
    r = _reader(dpc_servers, settings, start_bucket=str(FIRST), stable_only_file=str(stable_only))
    try:
        start = r.initialOffset()
        clock.advance("clock", ms(withheld + 3) + settings.delay_budget_ms)
        end = r.latestOffset(start, None)
        assert end == {"bucket": withheld}, "stable buckets go, the late one waits past its budget"
        assert r.latestOffset(end, None) == end
        stable_only.unlink()
        # Every bucket whose budget has passed on the clock: 4, 5 and 6.
        assert r.latestOffset(end, None) == {"bucket": withheld + 3, "tentative_from": withheld}
    finally:
        r.stop()
        for client in (clock, a, b):
            client.close()


def test_source_fills_a_declared_kind_column_per_bucket(dpc_servers):
    clock, a, b = withheld_inputs(dpc_servers, WITHHELD_FROM)
    settings = DPCSettings(X, clock=StreamRef(dpc_servers["home"].location, "clock"))
    schema = StructType([*CONNECTION_SCHEMA.fields, StructField("kind", StringType())])
    withheld = FIRST + WITHHELD_FROM
    r = _reader(dpc_servers, settings, schema, start_bucket=str(withheld - 1))
    try:
        clock.advance("clock", ms(withheld + 1) + settings.delay_budget_ms)
        start = r.initialOffset()
        end = r.latestOffset(start, None)
        assert end == {"bucket": withheld + 1, "tentative_from": withheld}
        table = pa.Table.from_batches(
            [batch for p in r.partitions(start, end) for batch in r.read(p)]
        )
        buckets = pa.compute.divide(table.column("stime").cast(pa.int64()), 1_000_000)
        kinds = table.column("kind").to_pylist()
        for bucket, kind in zip(buckets.to_pylist(), kinds, strict=True):
            assert kind == ("TENTATIVE" if bucket >= withheld else "STABLE")
        assert set(kinds) == {"STABLE", "TENTATIVE"}
        assert table.schema.names == schema.fieldNames()
    finally:
        r.stop()
        for client in (clock, a, b):
            client.close()


@pytest.mark.spark
def test_withheld_input_goes_tentative_then_reconciles_to_the_reference(
    spark, dpc_servers, tmp_path
):
    host = FragmentRuntime("H", spark, tmp_path / "H")
    try:
        expected = reference(dpc_servers, host)

        clock, a, b = withheld_inputs(dpc_servers, WITHHELD_FROM)
        settings = DPCSettings(X, clock=StreamRef(dpc_servers["home"].location, "clock"))
        budget = settings.delay_budget_ms
        assert budget == 2700
        withheld = FIRST + WITHHELD_FROM
        clock.advance("clock", ms(withheld))

        node = DPCFragment(host, spec(dpc_servers, ""), settings, epoch=0)
        node.start().processAllAvailable()
        assert node.state is NodeState.STABLE
        assert node.sink.processed_end == withheld

        # A failure shorter than the budget costs no tentative output.
        clock.advance("clock", ms(withheld + 1) + budget - 1)
        node.query().processAllAvailable()
        assert node.state is NodeState.STABLE
        assert node.sink.processed_end == withheld

        # Budget passed for bucket 4: it goes out tentatively, and only it (5 is not due yet).
        clock.advance("clock", ms(withheld + 1) + budget)
        node.query().processAllAvailable()
        assert node.state is NodeState.UP_FAILURE
        assert node.sink.processed_end == withheld + 1
        assert node.sink.checkpoint is not None
        assert node.sink.checkpoint.next_bucket == withheld

        # The failure goes on: each later bucket goes out as soon as its own budget passes.
        last = FIRST + SECONDS - 1
        clock.advance("clock", ms(last + 1) + budget)
        node.query().processAllAvailable()
        assert node.sink.processed_end == last + 1
        tentative = [m.row for _, m in node.sink.messages if m.kind is Kind.TENTATIVE]
        assert tentative, "windows closed by tentative buckets must come out tentatively"
        assert dpc_servers["home"].log.info("out")["boundary"] is None or (
            dpc_servers["home"].log.info("out")["boundary"] <= withheld
        ), "no stable boundary may be promised past the tentative buckets"
        assert not node.poll(), "nothing to reconcile while B is still missing"

        # Heal: B's missing buckets arrive from its log. Reconcile on a redo copy of the query,
        # started from the all-stable checkpoint, while the serving query goes on.
        publish(b, "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)
        serving = node.query()
        # The redo starts in a gap of the serving query (it yields the cores), so it may take a
        # few polls; it must start once the serving query has processed the heal.
        started = node.poll()
        start_by = time.monotonic() + 60
        while not started and time.monotonic() < start_by:
            serving.processAllAvailable()
            time.sleep(0.1)
            started = node.poll()
        assert started, "healed and permitted: the redo copy starts"
        assert node.sink.redo is not None
        stable_only = node.store.stable_only_path(node.sink.redo.copy)
        assert stable_only.exists(), "the redo releases stable buckets only"
        redo_spec = host.running_spec(node.sink.redo.copy)
        assert redo_spec is not None
        assert redo_spec.options["stable_only_file"] == str(stable_only)
        assert serving.isActive, (
            f"the serving query keeps running during the redo: {serving.exception()}"
        )
        sent_before = len(node.sink.messages)
        deadline = time.monotonic() + 60
        while node.sink.redo is not None and time.monotonic() < deadline:
            assert len(node.sink.messages) == sent_before, "the redo sends nothing until the switch"
            node.poll()
            time.sleep(0.1)
        assert node.sink.redo is None, "the redo must catch up with the serving query"
        assert not stable_only.exists(), "serving now, the copy may go tentative again"
        assert (node.redo_recuts, node.redo_failures) == (0, 0)
        assert not serving.isActive, "the switch stops the serving query"
        adopted = node.query()
        assert adopted.id != serving.id
        assert host.checkpoint_dir("ports") == tmp_path / "H" / "ports.redo-1"
        assert not (tmp_path / "H" / "ports").exists(), "the diverged checkpoint is dropped"
        while node.state is not NodeState.STABLE and time.monotonic() < deadline:
            adopted.processAllAvailable()
            node.poll()
            time.sleep(0.1)
        assert node.state is NodeState.STABLE

        assert rows(dpc_servers["home"].log.table("out")) == expected
        kinds = [m.kind for _, m in node.sink.messages]
        assert kinds.count(Kind.UNDO) == 1
        assert kinds.count(Kind.REC_DONE) == 1
        undo, done = kinds.index(Kind.UNDO), kinds.index(Kind.REC_DONE)
        assert Kind.TENTATIVE not in kinds[undo:], "no tentative output after the UNDO"
        assert undo < done
        corrections = [m.row for _, m in node.sink.messages[undo:done] if m.kind is Kind.STABLE]
        assert corrections, "the redo must send corrections"
        stable = [m.row for _, m in node.sink.messages if m.kind is Kind.STABLE]
        assert len({r.key for r in stable}) == len(stable), "a stable row was sent twice"
        final = consumer_view([m for _, m in node.sink.messages])
        assert sorted(r.key for r in final) == sorted(r.key for r in stable)
        assert len(final) == len(expected)
        assert {r.key for r in tentative} - {r.key for r in final}, (
            "tentative counts without B must differ from the corrected ones"
        )
        # The same sequence is on the wire, in sending order, for remote consumers.
        wire = dpc_servers["home"].log.table("out.dpc").sort_by("seq").column("kind").to_pylist()
        assert wire == [k.value for k in kinds]
        node.runtime.stop("ports")
        for client in (clock, a, b):
            client.close()
    finally:
        host.close()


@pytest.mark.spark
def test_a_node_tentative_from_its_first_batch_reconciles_from_its_replay_point(
    spark, dpc_servers, tmp_path
):
    """B sends nothing before the node starts, so its first batch goes out tentatively: the
    all-stable checkpoint is the one packed before batch 0 (no offsets, but the state's schema
    files). The redo is a new query to Spark, which refuses one whose state location is not
    empty, and must begin where the serving query began (its replay point), not at the oldest
    bucket the logs hold. Seen in the paper-settings bench: a copy's every redo died at start."""
    host = FragmentRuntime("H", spark, tmp_path / "H")
    try:
        expected = reference(dpc_servers, host)
        clock, a, b = withheld_inputs(dpc_servers, 0)
        settings = DPCSettings(X, clock=StreamRef(dpc_servers["home"].location, "clock"))
        last = FIRST + SECONDS - 1
        clock.advance("clock", ms(last + 1) + settings.delay_budget_ms)

        node = DPCFragment(host, spec(dpc_servers, ""), settings, epoch=0)
        node.start(replay_from=FIRST).processAllAvailable()
        assert node.state is NodeState.UP_FAILURE
        assert node.sink.checkpoint is not None and node.sink.checkpoint.state[0] == 0
        assert node.sink.first_bucket == FIRST
        assert any(m.kind is Kind.TENTATIVE for _, m in node.sink.messages)

        publish(b, "b", OTHER.seconds(0, SECONDS), BUCKET)
        serving = node.query()
        deadline = time.monotonic() + 90
        while node.sink.redo is None and time.monotonic() < deadline:
            serving.processAllAvailable()
            node.poll()
            time.sleep(0.1)
        assert node.sink.redo is not None, "healed and permitted: the redo copy starts"
        redo_spec = host.running_spec(node.sink.redo.copy)
        assert redo_spec is not None and redo_spec.options["start_bucket"] == str(FIRST)
        while node.state is not NodeState.STABLE and time.monotonic() < deadline:
            if node.sink.redo is None:
                node.query().processAllAvailable()
            node.poll()
            time.sleep(0.1)
        assert (node.redo_failures, node.redo_recuts) == (0, 0), host.failure(
            f"ports.redo-{node.sink.redo_count}"
        )
        assert node.state is NodeState.STABLE
        assert rows(dpc_servers["home"].log.table("out")) == expected
        kinds = [m.kind for _, m in node.sink.messages]
        assert kinds.count(Kind.UNDO) == 1 and kinds.count(Kind.REC_DONE) == 1
        node.runtime.stop("ports")
        for client in (clock, a, b):
            client.close()
    finally:
        host.close()


def _tentative_through_the_failure(dpc_servers, host, settings: DPCSettings, **node_args):
    """A node whose input B stops at bucket WITHHELD_FROM, run to the end of the input: it is
    UP_FAILURE with tentative output. Returns (node, clients to close)."""
    clock, a, b = withheld_inputs(dpc_servers, WITHHELD_FROM)
    clock.advance("clock", ms(FIRST + SECONDS) + settings.delay_budget_ms)
    node = DPCFragment(host, spec(dpc_servers, ""), settings, epoch=0, **node_args)
    node.start().processAllAvailable()
    assert node.state is NodeState.UP_FAILURE
    assert any(m.kind is Kind.TENTATIVE for _, m in node.sink.messages)
    return node, (clock, a, b)


def _reconciling_alone(dpc_servers, **extra) -> DPCSettings:
    clock = StreamRef(dpc_servers["home"].location, "clock")
    return DPCSettings(X, clock=clock, serve_while_reconciling=False, **extra)


def _poll_until(node: DPCFragment, done, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        if node.runtime.is_running("ports"):
            node.query().processAllAvailable()
        node.poll()
        time.sleep(0.1)
    assert done(), f"not reached in {seconds} s: {node.advertised_state}, {node.sink.history}"


def _stable_with_the_reference(node: DPCFragment, clients, dpc_servers, expected) -> None:
    """Poll the node to STABLE: its output log then equals the failure-free reference. Stops
    its query and closes its inputs' clients."""
    _poll_until(node, lambda: node.state is NodeState.STABLE)
    assert rows(dpc_servers["home"].log.table("out")) == expected
    node.runtime.stop("ports")
    for client in clients:
        client.close()


def _reconciling_auto(dpc_servers) -> DPCSettings:
    clock = StreamRef(dpc_servers["home"].location, "clock")
    return DPCSettings(X, clock=clock, stand_down_when_served=True)


def _another_copy_serves(_fragment: str) -> bool:
    return True


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["alone", "auto, another copy serving"])
def test_a_copy_reconciling_alone_stands_down_advertises_stabilization_and_corrects(
    spark, dpc_servers, tmp_path, mode
):
    """Borealis's way (``serve_while_reconciling`` off, or ``stand_down_when_served`` with the
    registry naming another copy that serves): from the redo's start the serving query is
    stopped and the copy advertises STABILIZATION (consumers read another copy), the redo runs
    without yielding, and the switch brings the same corrected output as reconciling
    alongside."""
    host = FragmentRuntime("H", spark, tmp_path / "H")
    try:
        expected = reference(dpc_servers, host)
        if mode == "alone":
            settings, node_args = _reconciling_alone(dpc_servers), {}
        else:
            settings = _reconciling_auto(dpc_servers)
            node_args = {"others_serving": _another_copy_serves}
        node, clients = _tentative_through_the_failure(dpc_servers, host, settings, **node_args)
        assert node.advertised_state is NodeState.UP_FAILURE
        serving = node.query()
        publish(clients[2], "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)

        _poll_until(node, lambda: node.sink.redo is not None)
        redo = node.sink.redo
        assert redo is not None
        assert not serving.isActive, "the serving query stands down for the redo"
        assert not host.is_running("ports")
        assert node.advertised_state is NodeState.STABILIZATION
        assert node.state is NodeState.UP_FAILURE, "the node's own state waits for the switch"
        assert node.sink.history[-1][0] is NodeState.STABILIZATION
        assert not node.store.pause_path(redo.copy).exists(), "nothing to yield to: no pause"
        # The state size the redo restores is read before the serving query stops.
        assert node.reconciliations[-1]["state_rows"] > 0, node.reconciliations
        sent_before = len(node.sink.messages)

        _poll_until(node, lambda: node.sink.redo is None)
        assert (node.redo_failures, node.redo_recuts) == (0, 0)
        undo = next(i for i, (_, m) in enumerate(node.sink.messages) if m.kind is Kind.UNDO)
        assert undo == sent_before, "the stood-down copy sent nothing before its UNDO"
        assert node.query().isActive and node.query().id != serving.id
        _stable_with_the_reference(node, clients, dpc_servers, expected)
        assert node.advertised_state is NodeState.STABLE
        kinds = [m.kind for _, m in node.sink.messages]
        assert kinds.count(Kind.UNDO) == 1 and kinds.count(Kind.REC_DONE) == 1
    finally:
        host.close()


@pytest.mark.spark
def test_a_copy_reconciling_auto_with_no_other_copy_serving_serves_beside_its_redo(
    spark, dpc_servers, tmp_path
):
    """``stand_down_when_served`` when the registry names no other copy serving (the copy's
    consumers have nobody else): the serving query goes on beside the redo, tentative and
    advertised UP_FAILURE until the switch, as reconciling alongside does."""
    asked: list[str] = []

    def nobody_else(fragment: str) -> bool:
        asked.append(fragment)
        return False

    host = FragmentRuntime("H", spark, tmp_path / "H")
    try:
        expected = reference(dpc_servers, host)
        node, clients = _tentative_through_the_failure(
            dpc_servers, host, _reconciling_auto(dpc_servers), others_serving=nobody_else
        )
        serving = node.query()
        publish(clients[2], "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)

        _poll_until(node, lambda: node.sink.redo is not None)
        assert asked == ["ports"], "asked once, when the redo began"
        assert serving.isActive, "no other copy serves: the serving query goes on"
        assert node.advertised_state is NodeState.UP_FAILURE
        _stable_with_the_reference(node, clients, dpc_servers, expected)
    finally:
        host.close()


@pytest.mark.spark
def test_a_copy_that_loses_its_permit_while_stood_down_serves_again_then_reconciles(
    spark, dpc_servers, tmp_path
):
    """The permit's renewal is refused mid-redo (its lease went to another copy): the redo is
    dropped and the stood-down serving query runs again from its checkpoint, tentative and
    advertised UP_FAILURE, until the permit is granted again."""
    answers = iter([True, False])  # granted, then the first renewal refused; later: granted

    def request(_name: str) -> bool:
        return next(answers, True)

    host = FragmentRuntime("H", spark, tmp_path / "H")
    try:
        expected = reference(dpc_servers, host)
        settings = _reconciling_alone(dpc_servers, permit_renew_seconds=0.1)
        node, clients = _tentative_through_the_failure(
            dpc_servers, host, settings, request_permission=request
        )
        publish(clients[2], "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)
        _poll_until(node, lambda: node.sink.redo is not None)
        assert node.advertised_state is NodeState.STABILIZATION
        stood_down = node.sink.history[-1][1]

        _poll_until(node, lambda: node.permit.lost == 1)
        assert host.is_running("ports"), "serving again once the redo is dropped"
        states = [state for state, at in node.sink.history if at >= stood_down]
        assert states[:2] == [NodeState.STABILIZATION, NodeState.UP_FAILURE], states
        _stable_with_the_reference(node, clients, dpc_servers, expected)
        assert node.sink.redo_count == 2
    finally:
        host.close()
