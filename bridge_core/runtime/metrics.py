"""The gateway's Prometheus metrics, on a registry of its own (no global state, several gateways
can live in one process, as the tests do).

Counters the gateway itself increments (events in, messages accepted, turns admitted and
answered, busy notices) are ordinary ``prometheus_client`` counters. Figures that other
components already keep (a sender's sends, edits and rate-limit pauses; the ledger's rows by
state; the members of each agent group) are read at scrape time into a ``Snapshot`` and exposed by
a collector, so there is one source of truth for each number.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "GatewayMetrics", "Snapshot"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Snapshot:
    """Figures read from the components at scrape time; keys are channel names or states."""

    sends: dict[str, int] = field(default_factory=dict)
    edits: dict[str, int] = field(default_factory=dict)
    rate_limit_pauses: dict[str, int] = field(default_factory=dict)
    ledger_rows: dict[str, int] = field(default_factory=dict)
    group_members: dict[str, int] = field(default_factory=dict)
    channel_healthy: dict[str, bool] = field(default_factory=dict)


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        for name, doc, values in (
            ("chatbridge_sends", "Posts sent to the platform, per channel.", snap.sends),
            ("chatbridge_edits", "Edits sent to the platform, per channel.", snap.edits),
            (
                "chatbridge_rate_limit_pauses",
                "Times a channel was paused by a rate limit.",
                snap.rate_limit_pauses,
            ),
        ):
            counter = CounterMetricFamily(name, doc, labels=["channel"])
            for channel, value in sorted(values.items()):
                counter.add_metric([channel], value)
            yield counter
        rows = GaugeMetricFamily(
            "chatbridge_ledger_rows", "Delivery ledger rows by state.", labels=["state"]
        )
        for state, value in sorted(snap.ledger_rows.items()):
            rows.add_metric([state], value)
        yield rows
        members = GaugeMetricFamily(
            "chatbridge_group_members", "Members of each channel's agent group.", labels=["channel"]
        )
        for channel, value in sorted(snap.group_members.items()):
            members.add_metric([channel], value)
        yield members
        healthy = GaugeMetricFamily(
            "chatbridge_channel_healthy", "1 when the channel can be sent to.", labels=["channel"]
        )
        for channel, ok in sorted(snap.channel_healthy.items()):
            healthy.add_metric([channel], 1.0 if ok else 0.0)
        yield healthy


class GatewayMetrics:
    """The counters a gateway increments and the scrape-time snapshot of everything else."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events_in = Counter(
            "chatbridge_events_in",
            "Fleet events accepted, by kind (unknown kinds count as Unknown).",
            ["kind"],
            registry=self.registry,
        )
        self.messages_accepted = Counter(
            "chatbridge_messages_accepted",
            "Messages accepted by POST /v1/messages, per channel.",
            ["channel"],
            registry=self.registry,
        )
        self.turns_admitted = Counter(
            "chatbridge_turns_admitted",
            "User messages admitted into a conversation log, per channel.",
            ["channel"],
            registry=self.registry,
        )
        self.turns_answered = Counter(
            "chatbridge_turns_answered",
            "Turns this gateway answered (a reply recorded in the ledger), per channel.",
            ["channel"],
            registry=self.registry,
        )
        self.busy_notices = Counter(
            "chatbridge_busy_notices",
            "Turns answered with a busy notice because the agent was at capacity.",
            ["channel"],
            registry=self.registry,
        )
        self.agent_errors = Counter(
            "chatbridge_agent_errors",
            "Turns whose agent raised an unexpected error, per channel.",
            ["channel"],
            registry=self.registry,
        )
        self._snapshot = _SnapshotCollector()
        self.registry.register(self._snapshot)

    def set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot.snapshot = snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)
