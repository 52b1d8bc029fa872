"""One HA node as a process: a source or a DPC fragment replica behind an ``HAServer``.

Run as ``python -m spark_jobs.ha.node CONFIG.json``; the scenario driver writes the config and
starts one process per node, so nodes share nothing but sockets (and the machine's clock, which
is the stime scale: ``stime = ms since the run's t0``).

A fragment node, every ``loop_ms``:

1. for each input stream, heartbeat threads poll every replica of the upstream fragment
   (``dpc_state`` every ``heartbeat_ms``, failed after ``misses`` silent intervals); the
   ``UpstreamSelector`` picks a STABLE replica first and switches in the background; a switch
   resynchronises by key (stable rows after the last one held, then the replica's tentative
   suffix), so nothing is lost or duplicated; replicas below the fenced epoch are ignored;
2. pulls new messages from the chosen replica into the DPC node (``app.availability.DPCNode``);
3. ticks the node and appends its output to its output log;
4. acknowledges upstream what it will never need again (upstream backup), and under passive
   standby ships its checkpoint to the backup every ``checkpoint_every_ms``.

A standby node idles until the driver's ``take_over`` command (after the registry's failover
movement is prepared): from the last checkpoint shipped to it (passive standby) or from empty
state and a replay point in the upstream logs (upstream backup).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.availability import (
    Checkpoint,
    DelayStrategy,
    DPCNode,
    FailureDetector,
    Message,
    NodeState,
    Operator,
    Passthrough,
    PeerPermission,
    ReplicaView,
    StreamView,
    UpstreamSelector,
    WindowCount,
)
from app.availability.delta import apply as apply_delta
from app.availability.delta import diff as diff_state
from app.availability.simulation import source_rows
from app.availability.tuples import Key, Kind
from spark_jobs.ha.arbiter import ArbiterClient, arbiter_client, is_rest
from spark_jobs.ha.registry import RegistryReporter
from spark_jobs.ha.wire import HAClient, HAServer
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient

log = logging.getLogger("fedload.ha.node")

OUT = "out"


def make_operator(spec: dict[str, Any], bucket_ms: int) -> Operator:
    kind = spec.get("type")
    if kind == "window_count":
        return WindowCount(int(spec["window_ms"]), bucket_ms)
    if kind == "passthrough":
        return Passthrough(int(spec.get("drop_multiple", 0)))
    raise ValueError(f"operator: unknown type {kind!r} (window_count, passthrough)")


@dataclass
class InputLink:
    """One input stream of a fragment node and the replicas that can serve it."""

    stream: str
    replicas: dict[str, str]
    selector: UpstreamSelector
    min_epoch: int = 0
    position: int = 0
    clients: dict[str, HAClient] = field(default_factory=dict)
    # Separate from the heartbeat thread's clients: a failing read must not close theirs.
    readers: dict[str, HAClient] = field(default_factory=dict)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What arrived on this input, as a consumer sees it: duplicates and losses show here.
    view: StreamView = field(default_factory=StreamView)
    last_key: Key | None = None
    read_errors: int = 0


class HANode:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.name: str = config["name"]
        self.fragment: str = config.get("fragment", self.name)
        self.role: str = config["role"]
        self.t0: float = float(config["t0"])
        self.bucket_ms = int(config.get("bucket_ms", 200))
        self.loop_s = int(config.get("loop_ms", 20)) / 1000
        self.epoch = int(config.get("epoch", 0))
        self.server = HAServer(port=int(config.get("port", 0)))
        self.server.controller = self
        self.lock = threading.RLock()
        self.permission_lock = threading.Lock()
        self.stopping = threading.Event()
        self.detector = FailureDetector(
            time.monotonic,
            interval=int(config.get("heartbeat_ms", 100)) / 1000,
            misses=int(config.get("misses", 3)),
        )
        self.peers: dict[str, str] = dict(config.get("peers", {}))
        arbiter = config.get("arbiter")
        if arbiter and is_rest(arbiter) and not config.get("arbiter_key"):
            # Found now rather than at the first partition, when it would read as a refusal.
            raise ValueError(
                f"node {self.name}: arbiter {arbiter} is the registry's REST arbiter and needs "
                "'arbiter_key' in the node config"
            )
        self.peer_permission = PeerPermission(self.name)
        self._holds_arbiter_permit = False
        # Reconciliation asked for while a peer was unreachable and the arbiter said no.
        self.refused_for_unreachable_peers = 0
        self.node: DPCNode | None = None
        self.links: dict[str, InputLink] = {}
        self.first_emit: dict[Key, int] = {}
        # When each TENTATIVE row was sent (a report splits them at the heal).
        self.tentative_emits: list[int] = []
        self.errors = 0
        self.events: list[dict[str, Any]] = []
        self._shipped = 0
        self._shipped_floor: int | None = None
        self._shipped_state: Any = None
        # Bytes of checkpoints shipped to the backup, full and delta (passive standby).
        self.shipped_bytes: dict[str, int] = {}
        self._last_ship = 0.0
        self._last_ack = 0.0
        for stream, spec in config.get("inputs", {}).items():
            replicas = dict(spec["replicas"])
            self.links[stream] = InputLink(
                stream, replicas, UpstreamSelector(stream, tuple(replicas))
            )
        for consumer in config.get("consumers", []):
            self.server.output(OUT).register(consumer)
        if self.role == "fragment":
            self.node = self._make_node(int(config.get("start_bucket", 0)))

    # -- clock -------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int((time.time() - self.t0) * 1000)

    def _make_node(self, start_bucket: int) -> DPCNode:
        config = self.config
        x_ms = int(config.get("max_delay_ms", 3000))
        budget = int(config.get("delay_budget_ms", round(0.9 * x_ms)))
        return DPCNode(
            self.name,
            list(self.links),
            make_operator(config["operator"], self.bucket_ms),
            bucket_ms=self.bucket_ms,
            delay_budget_ms=budget,
            strategy=DelayStrategy(config.get("strategy", "delay_each")),
            start_bucket=start_bucket,
            request_permission=self._ask_peers,
            release_permission=self._release_peers,
            replay_per_tick=config.get("replay_per_tick"),
            # Redoing r buckets per loop takes a loop per r buckets; with no limit, a loop.
            reconcile_ms_per_bucket=(
                int(config.get("loop_ms", 20)) / int(config.get("replay_per_tick") or 1)
            ),
        )

    # -- Controller (called from Flight threads) ---------------------------------------------
    def heartbeat(self) -> dict[str, Any]:
        state = self.node.state.value if self.node is not None else None
        if self.role == "source":
            state = NodeState.STABLE.value
        return {"name": self.name, "state": state, "epoch": self.epoch, "role": self.role}

    def permission(self, requester: str) -> bool:
        # Not under self.lock: the main loop holds it while it asks its own peers, and two
        # replicas asking each other would each wait for the other's loop (and then time out).
        with self.permission_lock:
            state = self.node.state if self.node is not None else NodeState.STABLE
            return self.peer_permission.on_request(requester, state, self.now_ms())

    def release(self, requester: str) -> None:
        with self.permission_lock:
            self.peer_permission.on_release(requester)

    def control(self, body: dict[str, Any]) -> Any:
        command = body.get("cmd")
        with self.lock:
            if command == "status":
                return self.status(full=bool(body.get("full")))
            if command == "set_inputs":
                for stream, spec in body["inputs"].items():
                    link = self.links[stream]
                    link.replicas = dict(spec["replicas"])
                    link.min_epoch = int(spec.get("min_epoch", link.min_epoch))
                    # A current replica fenced out stays "current" until the next loop's
                    # choice switches away from it, so the switch says where it came from.
                    link.selector.replicas = tuple(link.replicas)
                self.events.append({"at": self.now_ms(), "event": "set_inputs", "body": body})
                return True
            if command == "take_over":
                return self._take_over(body)
            if command == "promote":
                # Active standby: already running; only its lease epoch changes.
                self.epoch = int(body["epoch"])
                self.events.append({"at": self.now_ms(), "event": "promote", "epoch": self.epoch})
                return True
            if command == "start":
                # The shared stime origin, sent once every node is up: a slow process start
                # must not look like a failed input.
                self.t0 = float(body["t0"])
                return True
            if command == "stop":
                self.stopping.set()
                return True
        raise ValueError(f"ha_control: unknown command {command!r}")

    def status(self, *, full: bool = False) -> dict[str, Any]:
        log = self.server.output(OUT)
        out: dict[str, Any] = {
            "name": self.name,
            "role": self.role,
            "epoch": self.epoch,
            "now_ms": self.now_ms(),
            "state": self.heartbeat()["state"],
            "boundary": log.boundary,
            "events": self.events,
            "errors": self.errors,
            "shipped_bytes": self.shipped_bytes,
            "refused_for_unreachable_peers": self.refused_for_unreachable_peers,
            "tentative_emits": self.tentative_emits,
            "inputs": {
                s: {
                    "current": link.selector.current,
                    "version": link.selector.version,
                    "switches": [
                        {
                            "from": w.from_replica,
                            "to": w.to_replica,
                            "at": w.at,
                            "version": w.version,
                        }
                        for w in link.selector.switches
                    ],
                    "boundary": link.view.boundary,
                    "duplicates": link.view.duplicates,
                    "stable_rows": len(link.view.stable),
                    "tentative_rows": link.view.tentative_total,
                    "read_errors": link.read_errors,
                }
                for s, link in self.links.items()
            },
        }
        if self.node is not None:
            out["history"] = [[s.value, t] for s, t in self.node.history]
            out["reconciliations"] = self.node.reconciliations
            out["tentative_buckets"] = self.node.tentative_buckets
            out["duplicates_dropped"] = self.node.soutput.duplicates_dropped
        if full:
            out["first_emit"] = [[k[0], k[1], t] for k, t in self.first_emit.items()]
            out["input_keys"] = {
                s: [[r.stime, r.tid] for r in link.view.stable] for s, link in self.links.items()
            }
        return out

    # -- reconciliation permission between replicas ------------------------------------------
    def _ask_peers(self, _name: str) -> bool:
        now = self.now_ms()
        with self.permission_lock:
            if not self.peer_permission.may_ask(now):
                return False
            self.peer_permission.asking = True
        granted: list[str] = []
        unreachable: list[str] = []
        for peer, location in self.peers.items():
            client = HAClient(location, timeout=0.3)
            try:
                ok = bool(client.action("dpc_permission", requester=self.name))
            except Exception:
                # Crashed or cut off from us: we cannot tell which, and a cut-off peer may
                # be reconciling right now. The arbiter decides (below).
                unreachable.append(peer)
                continue
            finally:
                client.close()
            if not ok:
                self._release_to(granted)
                return False
            granted.append(peer)
        if unreachable and not self._ask_arbiter():
            self._release_to(granted)
            self.refused_for_unreachable_peers += 1
            return False
        with self.permission_lock:
            self.peer_permission.asking = False
        self.events.append(
            {"at": now, "event": "reconcile_permitted", "arbitrated": bool(unreachable)}
        )
        return True

    def _ask_arbiter(self) -> bool:
        """The arbiter's permit for this fragment; refused when there is no arbiter or it is
        unreachable too (then the node keeps processing tentatively and asks again later)."""
        client = self._arbiter()
        if client is None:
            return False
        try:
            granted = client.request(self.fragment, self.name)
        except Exception:
            return False
        finally:
            client.close()
        self._holds_arbiter_permit = self._holds_arbiter_permit or granted
        return granted

    def _arbiter(self) -> ArbiterClient | None:
        """The Flight arbiter of the scenarios, or the registry's REST one for an http URL."""
        location = self.config.get("arbiter")
        if not location:
            return None
        # A REST call commits a row at the registry: more than a loopback Flight action.
        default_ms = 2000 if is_rest(location) else 300
        timeout = int(self.config.get("arbiter_timeout_ms", default_ms)) / 1000
        return arbiter_client(location, key=self.config.get("arbiter_key"), timeout=timeout)

    def _release_to(self, peers: list[str]) -> None:
        for peer in peers:
            client = HAClient(self.peers[peer], timeout=0.3)
            with contextlib.suppress(Exception):
                client.action("dpc_release", requester=self.name)
            client.close()

    def _release_peers(self, _name: str) -> None:
        self.events.append({"at": self.now_ms(), "event": "reconciled"})
        self._release_to(list(self.peers))
        client = self._arbiter() if self._holds_arbiter_permit else None
        if client is not None:
            try:
                client.release(self.fragment, self.name)
            except Exception as error:  # unreleased, the permit lapses with its lease
                log.warning(
                    "%s: the arbiter's permit for %s was not released: %s",
                    self.name,
                    self.fragment,
                    error,
                )
            client.close()
            self._holds_arbiter_permit = False

    # -- failover ----------------------------------------------------------------------------
    def _take_over(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.node is not None:
            raise ValueError(f"{self.name} already runs {self.fragment}")
        self.epoch = int(body["epoch"])
        mode = body["mode"]
        if mode == "checkpoint":
            movement, next_bucket, state, deltas = self._rebuild_checkpoint()
            self.node = self._make_node(next_bucket)
            self.node.restore(Checkpoint(next_bucket, state))
            detail = {
                "checkpoint_movement": movement,
                "next_bucket": next_bucket,
                "deltas_applied": deltas,
            }
        elif mode == "replay":
            replay_from = int(body["replay_from_ms"])
            self.node = self._make_node(replay_from // self.bucket_ms)
            detail = {"replay_from_ms": replay_from}
        else:
            raise ValueError(f"take_over: mode must be checkpoint or replay, got {mode!r}")
        self.role = "fragment"
        self.events.append({"at": self.now_ms(), "event": "take_over", "mode": mode, **detail})
        return detail

    def _rebuild_checkpoint(self) -> tuple[int, int, Any, int]:
        """The newest state the shipped checkpoints give: the last full one plus the unbroken
        chain of deltas after it. Returns (movement, next_bucket, state, deltas applied)."""
        shipped = self.server.take_checkpoints(self.fragment)
        fulls = [i for i, (_, doc) in enumerate(shipped) if doc.get("kind") == "full"]
        if not fulls:
            raise ValueError(f"{self.name}: no full checkpoint of {self.fragment} was shipped here")
        movement, doc = shipped[fulls[-1]]
        state, next_bucket, applied = doc["state"], int(doc["next_bucket"]), 0
        for later, delta in shipped[fulls[-1] + 1 :]:
            if delta.get("kind") != "delta" or int(delta["base"]) != movement:
                break  # a lost or out-of-order delta: stop at the last consistent state
            state = apply_delta(state, delta["patch"])
            movement, next_bucket, applied = later, int(delta["next_bucket"]), applied + 1
        return movement, next_bucket, state, applied

    # -- the loop ----------------------------------------------------------------------------
    def _heartbeats(self) -> None:
        """Poll every upstream replica; runs in its own thread so a silent peer never stalls
        processing (a dropped link makes calls wait for their timeout)."""
        while not self.stopping.is_set():
            for link in list(self.links.values()):
                for replica, location in list(link.replicas.items()):
                    self.detector.watch(replica)
                    if not self.detector.should_ping(replica):
                        continue
                    client = link.clients.setdefault(
                        replica, HAClient(location, timeout=self.detector.interval)
                    )
                    if client.location != location:
                        client.close()
                        client = link.clients[replica] = HAClient(
                            location, timeout=self.detector.interval
                        )
                    try:
                        state = client.action("dpc_state")
                    except Exception:
                        # The wait ended unanswered: the detector's one rule counts the window
                        # from the last answer to the end of such waits (never the clock alone).
                        self.detector.missed(replica)
                        continue
                    self.detector.heard(replica)
                    link.states[replica] = state
            time.sleep(self.detector.interval / 4)

    def _views(self, link: InputLink) -> list[ReplicaView]:
        views = []
        for replica in link.replicas:
            info = link.states.get(replica)
            state = NodeState(info["state"]) if info and info.get("state") else None
            fenced = info is not None and int(info.get("epoch", 0)) < link.min_epoch
            reachable = not self.detector.failed(replica) and info is not None and not fenced
            views.append(ReplicaView(replica, state, reachable))
        return views

    def _feed(self, link: InputLink, messages: list[Message], now: int) -> None:
        assert self.node is not None
        for message in messages:
            link.view.apply(message, now)
            self.node.receive(link.stream, message)
        link.last_key = link.view.last_key

    def _pull(self, link: InputLink, now: int) -> None:
        switch = link.selector.decide(self._views(link), now)
        if switch is not None:
            self.events.append(
                {
                    "at": now,
                    "event": "switch",
                    "stream": link.stream,
                    "from": switch.from_replica,
                    "to": switch.to_replica,
                    "version": switch.version,
                }
            )
            assert self.node is not None
            self.node.sunion.forget_tentative(link.stream)
            link.view.switch()
        current = link.selector.current
        if current is None or self.detector.failed(current):
            # A replica known to be silent would make every read wait for its timeout.
            return
        location = link.replicas.get(current)
        if location is None:
            # Fenced out by the registry and nothing else usable yet: wait for the next loop.
            return
        client = link.readers.get(current)
        if client is None or client.location != location:
            client = link.readers[current] = HAClient(location, timeout=0.15)
        try:
            if switch is not None:
                messages, position = client.resync(OUT, link.last_key)
            else:
                messages, position = client.read(OUT, link.position, link.last_key)
        except Exception:
            link.read_errors += 1
            if switch is not None:
                # Not resynchronised yet: resync again on the next loop.
                link.selector.current = switch.from_replica
                link.selector.switches.pop()
                link.selector.version -= 1
            return
        link.position = position
        self._feed(link, messages, now)

    def _ack_and_ship(self, now: int) -> None:
        assert self.node is not None
        # What a replacement would need replayed: from the checkpoint, or from the oldest open
        # window (upstream backup rebuilds state from empty).
        floor = self.node.replay_point * self.bucket_ms
        windows = getattr(self.node.operator, "windows", None)
        if windows:
            floor = min(floor, min(windows))
        backup = self.config.get("checkpoint_to")
        if (
            backup
            and time.monotonic() - self._last_ship
            >= self.config.get("checkpoint_every_ms", 1000) / 1000
            and self.node.state is NodeState.STABLE
        ):
            self._last_ship = time.monotonic()
            checkpoint = self.node.checkpoint
            full_every = int(self.config.get("full_checkpoint_every", 10))
            doc: dict[str, Any] = {"next_bucket": checkpoint.next_bucket}
            if self._shipped_state is None or self._shipped % full_every == 0:
                doc.update(kind="full", state=checkpoint.state)
            else:
                # Only what changed since the last shipped checkpoint, which the backup holds.
                doc.update(
                    kind="delta",
                    base=self._shipped,
                    patch=diff_state(self._shipped_state, checkpoint.state),
                )
            data = json.dumps(doc).encode()
            self._shipped += 1
            try:
                with StreamClient(backup) as client:
                    client.ship_checkpoint(self.fragment, self._shipped, PackedCheckpoint.of(data))
                self._shipped_floor = checkpoint.next_bucket * self.bucket_ms
                self._shipped_state = checkpoint.state
                self.shipped_bytes[doc["kind"]] = self.shipped_bytes.get(doc["kind"], 0) + len(data)
            except Exception as error:
                # The backup may have missed it: the next one is full, never a broken chain.
                self._shipped_state = None
                self.events.append({"at": now, "event": "ship_failed", "error": str(error)})
        if backup:
            # Passive standby replays from the last checkpoint the backup holds.
            floor = min(floor, self._shipped_floor if self._shipped_floor is not None else 0)
        if time.monotonic() - self._last_ack < 0.5:
            return
        self._last_ack = time.monotonic()
        for link in self.links.values():
            location = link.replicas.get(link.selector.current or "")
            if location is None:
                continue
            acker = HAClient(location, timeout=0.2)
            with contextlib.suppress(Exception):
                acker.action("dpc_ack", stream=OUT, consumer=self.name, stime=floor)
            acker.close()

    def _source_step(self, rows: list[Any], sent: int, now: int) -> int:
        messages: list[Message] = []
        while sent < len(rows) and rows[sent].stime < now:
            messages.append(Message.stable(rows[sent]))
            sent += 1
        if now > 0:
            messages.append(Message.boundary(now))
        self.server.append(OUT, messages)
        return sent

    def _step(self, rows: list[Any], sent: int, now: int) -> int:
        if self.role == "source":
            return self._source_step(rows, sent, now)
        if self.node is None or now < 0:
            return sent
        for link in self.links.values():
            self._pull(link, now)
        out = self.node.tick(now)
        for message in out:
            if message.row is not None and message.kind in (Kind.STABLE, Kind.TENTATIVE):
                self.first_emit.setdefault(message.row.key, now)
                if message.kind is Kind.TENTATIVE:
                    self.tentative_emits.append(now)
        self.server.append(OUT, out)
        self._ack_and_ship(now)
        return sent

    def run(self) -> None:
        beat = threading.Thread(target=self._heartbeats, daemon=True)
        beat.start()
        reporter = None
        if self.config.get("registry"):
            reporter = RegistryReporter(
                self.config["registry"], lambda: self.heartbeat()["state"], self.server.location
            )
            reporter.start()
        rows: list[Any] = []
        if self.role == "source":
            spec = self.config["source"]
            rows = source_rows(
                spec["prefix"],
                rate_per_second=int(spec["rate"]),
                duration_ms=int(spec["duration_ms"]),
                keys=int(spec["keys"]),
            )
        sent = 0
        while not self.stopping.is_set():
            began = time.monotonic()
            now = self.now_ms()
            with self.lock:
                try:
                    sent = self._step(rows, sent, now)
                except Exception:
                    # A bug or a surprise in one loop must not kill the node silently: log it
                    # (the scenario keeps the node logs) and carry on with the next loop.
                    self.errors += 1
                    traceback.print_exc()
            time.sleep(max(0.0, self.loop_s - (time.monotonic() - began)))
        if reporter is not None:
            reporter.stop()
        self.server.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m spark_jobs.ha.node CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    node = HANode(config)
    signal.signal(signal.SIGTERM, lambda *_: node.stopping.set())
    ready = config.get("ready_file")
    if ready:
        Path(ready).write_text(node.server.location)
    node.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
