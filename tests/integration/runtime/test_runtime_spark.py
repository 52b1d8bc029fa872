"""Fragments as streaming queries on SUnion/SOutput, restarted and moved between hosts.

Every test compares with a reference: the same input through the same fragment on one host
without restarts or moves. Equal sorted row lists mean nothing lost and nothing duplicated.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from spark_jobs.runtime import (
    FencedError,
    FragmentRuntime,
    InMemoryCoordinator,
    LiveHost,
    MoveAborted,
    PackedCheckpoint,
    RemoteHost,
    SOutput,
    StreamClient,
    StreamRef,
    pace,
    publish,
    relocate,
)
from spark_jobs.runtime.soutput import NAMESPACE_BITS, write_namespace
from tests.integration.runtime.conftest import (
    BUCKET,
    GENERATOR,
    declare,
    ports_fragment,
    rows,
    run_reference,
)

pytestmark = pytest.mark.spark

SECONDS = 14


def reference(make_runtime, servers) -> list[tuple]:
    return run_reference(
        make_runtime,
        servers,
        lambda source: publish(source, "conns-ref", GENERATOR.seconds(0, SECONDS), BUCKET),
    )


def test_sunion_query_sees_only_buckets_every_input_closed(spark, servers, make_runtime):
    left = declare(servers["source"], "left")
    right = declare(servers["home"], "right", "out")
    spec = dataclasses.replace(
        ports_fragment("pass", servers["source"], "left", servers["home"], "out"),
        build=lambda df: df,  # stateless: what SUnion releases is exactly what comes out
        inputs=(
            StreamRef(servers["source"].location, "left"),
            StreamRef(servers["home"].location, "right"),
        ),
    )
    host = make_runtime("A")
    try:
        publish(left, "left", GENERATOR.seconds(0, 6), BUCKET)
        publish(right, "right", GENERATOR.seconds(0, 3), BUCKET)
        host.start(spec, epoch=0).processAllAvailable()
        assert servers["home"].log.info("out")["rows"] == 2 * GENERATOR.seconds(0, 3).num_rows
        publish(right, "right", GENERATOR.seconds(3, 6), BUCKET)
        host.query("pass").processAllAvailable()
        assert servers["home"].log.info("out")["rows"] == 2 * GENERATOR.seconds(0, 6).num_rows
    finally:
        host.stop("pass")
        left.close()
        right.close()


def test_close_leaves_no_pace_or_alternates_directory_beside_the_root(spark, servers, tmp_path):
    """A scenario's reference runs on a temporary root: the directories beside it go with the
    runtime, the checkpoint root stays (a persistent agent restarts from it)."""
    conns = declare(servers["source"], "conns")
    declare(servers["home"], "out").close()
    spec = dataclasses.replace(
        ports_fragment("pass", servers["source"], "conns", servers["home"], "out"),
        build=lambda df: df,
    )
    root = tmp_path / "A"
    host = FragmentRuntime("A", spark, root)
    try:
        publish(conns, "conns", GENERATOR.seconds(0, 3), BUCKET)
        host.start(spec, epoch=0).processAllAvailable()
        # A warm copy paces it (``warm.WarmSource``); its alternates are listed at the start.
        pace.write(host.pace_file("pass"), host.checkpoint_dir("pass") / "offsets", 0)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["A", "A.alternates", "A.pace"]
    finally:
        host.close()
        conns.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A"]
    assert (root / "pass" / "offsets").is_dir()


def test_rerun_batch_after_crash_is_written_once(servers, make_runtime):
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    host = make_runtime("A")
    with declare(servers["source"]) as source:
        publish(source, "conns", GENERATOR.seconds(0, 8), BUCKET)
        host.start(spec, epoch=0).processAllAvailable()
        stats = host.stats("frag")
        assert stats is not None and stats.state_rows > 0 and stats.batch_seconds > 0
        host.stop("frag")
        # A crash after SOutput wrote batch N but before Spark committed it: drop commits/N.
        commits = host.checkpoint_dir("frag") / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
        publish(source, "conns", GENERATOR.seconds(8, SECONDS), BUCKET)
        host.start(spec, epoch=0).processAllAvailable()
        assert host.sink("frag").skipped == 1  # batch N ran again, the log kept one copy
        host.stop("frag")
    assert rows(servers["home"].log.table("out")) == expected


def test_moved_mid_stream_equals_reference_and_old_host_is_fenced(servers, make_runtime):
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    a, b = make_runtime("A"), make_runtime("B")
    coordinator = InMemoryCoordinator({"frag": "A"})
    with declare(servers["source"]) as source:
        # Second 6 is mid-window ([4, 8)): the moved state holds a half-built port set.
        publish(source, "conns", GENERATOR.seconds(0, 6), BUCKET)
        a.start(spec, epoch=0).processAllAvailable()
        # B pulls from A over Flight, as an agent in another process would (RemoteHost).
        moved = relocate(spec, RemoteHost("A", a.location), b, coordinator=coordinator)
        assert coordinator.host("frag") == "B"
        assert moved.epoch == coordinator.current_epoch("frag") == 1
        assert moved.checkpoint_bytes > 0
        # RocksDB commits each batch as a changelog (snapshots come later, in the background).
        state = [p.name for p in b.checkpoint_dir("frag").glob("state/0/*/*") if p.is_file()]
        assert any(n.endswith(".changelog") for n in state), f"state travels as RocksDB: {state}"
        assert not a.is_running("frag") and not a.checkpoint_dir("frag").exists()
        publish(source, "conns", GENERATOR.seconds(6, SECONDS), BUCKET)
        b.query("frag").processAllAvailable()
        b.stop("frag")
    got = rows(servers["home"].log.table("out"))
    assert got == expected

    # The old host, still holding epoch 0, cannot append any more.
    stale = SOutput(servers["home"].location, "out", epoch=0)
    empty = a.spark.createDataFrame([], "stime timestamp")
    with pytest.raises(FencedError):
        stale.write(empty, 10_000)
    assert rows(servers["home"].log.table("out")) == got


@dataclasses.dataclass
class CorruptInTransit(LiveHost):
    """Ships bytes that do not match the checksum announced with them."""

    def release(self, fragment):
        packed = super().release(fragment)
        return PackedCheckpoint(packed.data[:-1] + b"?", packed.sha256)


def test_aborted_move_leaves_source_host_and_output_intact(servers, make_runtime):
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    a: FragmentRuntime = make_runtime("A")
    b: FragmentRuntime = make_runtime("B")
    coordinator = InMemoryCoordinator({"frag": "A"})
    with declare(servers["source"]) as source:
        publish(source, "conns", GENERATOR.seconds(0, 6), BUCKET)
        a.start(spec, epoch=0).processAllAvailable()
        with pytest.raises(MoveAborted, match="refused"):
            relocate(spec, CorruptInTransit(a), b, coordinator=coordinator)
        assert coordinator.host("frag") == "A" and coordinator.current_epoch("frag") == 0
        assert a.is_running("frag") and not b.is_running("frag")
        publish(source, "conns", GENERATOR.seconds(6, SECONDS), BUCKET)
        a.query("frag").processAllAvailable()
        a.stop("frag")
    assert rows(servers["home"].log.table("out")) == expected


def test_fragments_chain_across_hosts_through_output_boundaries(spark, servers, make_runtime):
    """(b) on A writes its log on A's own server; (c) on B reads it over Flight through SUnion."""
    from spark_jobs.fragments import distinct_port_counts, prefix_scanner_counts
    from spark_jobs.runtime import FragmentSpec

    a, b = make_runtime("A"), make_runtime("B")
    declare(servers["source"], "conns").close()
    declare(a.server, "scanners").close()
    declare(servers["home"], "prefixes").close()
    ports = dataclasses.replace(
        ports_fragment("ports", servers["source"], "conns", a.server, "scanners"),
    )
    scanners_schema = distinct_port_counts(
        spark.createDataFrame([], ports.input_schema), window_seconds=4, threshold=3
    ).schema
    prefixes = FragmentSpec(
        name="prefixes",
        build=lambda df: prefix_scanner_counts(df, window_seconds=4),
        input_schema=scanners_schema,
        inputs=(StreamRef(a.location, "scanners"),),
        output=StreamRef(servers["home"].location, "prefixes"),
        bucket_seconds=BUCKET,
        trigger_seconds=0.2,
    )
    data = GENERATOR.seconds(0, 24)
    with declare(servers["source"]) as source:
        publish(source, "conns", data, BUCKET)
    qa = a.start(ports, epoch=0)
    # (c) starts while (b) runs, once (b)'s log holds its first rows: a fresh SUnion over an
    # empty log starts at bucket 0, and its first read steps through every bucket number from
    # there to the data's (over a minute of one core here, for no rows).
    while a.server.log.info("scanners")["first"] is None:
        if qa.exception() is not None or not qa.isActive:
            raise AssertionError(f"(b) stopped before its first rows: {qa.exception()}")
        time.sleep(0.1)
    qb = b.start(prefixes, epoch=0)
    seen, stable = -1, 0
    for _ in range(40):
        qa.processAllAvailable()
        qb.processAllAvailable()
        count = servers["home"].log.info("prefixes")["rows"]
        stable = stable + 1 if count == seen else 0
        seen = count
        if stable >= 4:
            break
    a.stop("ports")
    b.stop("prefixes")

    got = rows(servers["home"].log.table("prefixes"))
    assert got and len(got) == len(set(got))
    static = spark.createDataFrame(data.to_pandas(), ports.input_schema)
    expected = rows(
        prefix_scanner_counts(
            distinct_port_counts(static, window_seconds=4, threshold=3), window_seconds=4
        ).toArrow()
    )
    last = max(r[0] for r in got)
    assert got == [r for r in expected if r[0] <= last]


def test_target_crash_before_resume_leaves_one_host_and_it_resumes_exactly(
    servers, make_runtime, monkeypatch
):
    from spark_jobs.runtime import ResumeFailed

    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    a, b = make_runtime("A"), make_runtime("B")
    coordinator = InMemoryCoordinator({"frag": "A"})
    with declare(servers["source"]) as source:
        publish(source, "conns", GENERATOR.seconds(0, 6), BUCKET)
        a.start(spec, epoch=0).processAllAvailable()

        def dies(*args, **kwargs):
            raise RuntimeError("target process died")

        monkeypatch.setattr(b, "start", dies)
        with pytest.raises(ResumeFailed):
            relocate(spec, LiveHost(a), b, coordinator=coordinator)
        monkeypatch.undo()
        # Committed: B is the only host, A is stopped; B's agent restarts from what it restored.
        assert coordinator.host("frag") == "B" and not a.is_running("frag")
        publish(source, "conns", GENERATOR.seconds(6, SECONDS), BUCKET)
        b.start(spec, epoch=coordinator.current_epoch("frag")).processAllAvailable()
        b.stop("frag")
    assert rows(servers["home"].log.table("out")) == expected


def test_a_failover_s_batch_id_space_travels_with_the_checkpoint(servers, make_runtime):
    """A host restarted from empty state by a failover writes its batch ids in a space of its
    own (the failed host wrote Spark's ids from 0); when the market later moves the fragment on,
    the new host must keep writing in that space, or the log drops its batches as seen."""
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    # The failed host F had written Spark's batch ids 0..39 (empty here: only the ids matter).
    failed = SOutput(servers["home"].location, "out", epoch=0)
    empty = make_runtime("F").spark.createDataFrame(
        [], "stime timestamp, window_start timestamp, src_ip string, ports int"
    )
    for batch_id in range(40):
        assert failed.write(empty, batch_id)
    # A took the fragment over from empty state, in namespace 1.
    a, b = make_runtime("A"), make_runtime("B")
    write_namespace(a.checkpoint_dir("frag"), 1)
    coordinator = InMemoryCoordinator({"frag": "A"})
    with declare(servers["source"]) as source:
        publish(source, "conns", GENERATOR.seconds(0, 6), BUCKET)
        a.start(spec, epoch=0).processAllAvailable()
        assert a.sink("frag").namespace == 1
        moved = relocate(spec, RemoteHost("A", a.location), b, coordinator=coordinator)
        assert b.output_namespace("frag") == 1
        publish(source, "conns", GENERATOR.seconds(6, SECONDS), BUCKET)
        b.query("frag").processAllAvailable()
        written_at_b = b.sink("frag")
        b.stop("frag")
    assert moved.epoch == 1
    assert written_at_b.written > 0 and written_at_b.skipped == 0
    with StreamClient(servers["home"].location) as client:
        ids = [int(i) for i in client.info("out")["written"]]
    assert all(i < 40 or i >> NAMESPACE_BITS == 1 for i in ids), ids
    assert rows(servers["home"].log.table("out")) == expected


class PoolRecordingOutput(SOutput):
    """SOutput that notes the scheduler pool its batches' jobs are submitted in."""

    pools: list[str | None]

    def write(self, batch, batch_id: int) -> bool:
        self.pools.append(batch.sparkSession.sparkContext.getLocalProperty("spark.scheduler.pool"))
        return super().write(batch, batch_id)


def test_each_query_and_copy_submits_its_batches_in_a_pool_of_its_own(spark, servers, make_runtime):
    """Under spark.scheduler.mode=FAIR a pool per query is what lets a serving query's tasks go
    between a DPC redo's (bench/ha/scheduler_pools.py); the property must reach the jobs the
    foreachBatch sink submits, and must not stay set on the thread that started the query."""
    conns = declare(servers["source"], "conns")
    outs = declare(servers["home"], "out-ports", "out-ports.copy")
    spec = ports_fragment("ports", servers["source"], "conns", servers["home"], "ports")
    host = make_runtime("A")
    publish(conns, "conns", GENERATOR.seconds(0, 4), BUCKET)
    outputs = []
    for slot in ("ports", "ports.copy"):
        output = PoolRecordingOutput(servers["home"].location, f"out-{slot}", 0)
        output.pools = []
        outputs.append(output)
    try:
        host.start(spec, epoch=0, sink=outputs[0]).processAllAvailable()
        copy = host.start_copy(
            spec, "ports.copy", host.checkpoint_root / "ports.copy", epoch=0, sink=outputs[1]
        )
        copy.processAllAvailable()
        assert outputs[0].pools and set(outputs[0].pools) == {"ports"}
        assert outputs[1].pools and set(outputs[1].pools) == {"ports.copy"}
        assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None
    finally:
        for slot in ("ports.copy", "ports"):
            host.stop(slot)
        conns.close()
        outs.close()
