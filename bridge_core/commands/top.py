"""``chatbridge top``: a running gateway on one screen, refreshed in place, from ``/v1/status``.

Channels with their health and how much of their budget the last second, minute and hour used;
the live messages each notifier holds; the members of each agent group; the ledger's rows by state.
It only reads the API, so it can watch a gateway on another host (``--url``, ``--token``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import httpx
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bridge_core.commands import config_option, load_cli_config

__all__ = ["command", "render_status"]

TOKEN_ENV = "BRIDGE_API_TOKEN"
LIVE_SHOWN = 8  # live messages shown per channel


def _budget_use(channel: dict[str, Any]) -> str:
    budget, sends = channel.get("budget") or {}, channel.get("sends") or {}
    parts = [f"{sends.get('second', 0)}/{budget.get('burst', '?')} burst"]
    for window in budget.get("windows", []):
        seconds = float(window["seconds"])
        label = "hour" if seconds >= 3600 else "minute" if seconds >= 60 else "second"
        parts.append(f"{sends.get(label, 0)}/{window['limit']} per {label}")
    if len(parts) == 1:
        parts.append(f"{sends.get('minute', 0)} this minute")
    return ", ".join(parts)


def render_status(status: dict[str, Any]) -> RenderableType:
    """The dashboard for one ``/v1/status`` answer."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(status.get("time", time.time())))
    heading = Text.assemble(
        ("chatbridge top ", "bold"), f"{status.get('gateway')} at {status.get('url')}  {when}"
    )
    channels = Table(title="channels", expand=True)
    for column in ("channel", "health", "budget used", "posts/edits", "queued", "members"):
        channels.add_column(column, overflow="fold")
    live = Table(title="live messages", expand=True)
    for column in ("channel", "agent", "workspace", "state", "status"):
        live.add_column(column, overflow="ellipsis", no_wrap=True)
    for name, channel in status.get("channels", {}).items():
        healthy = channel.get("healthy", False)
        health = (
            Text("ok", style="green")
            if healthy
            else Text(f"unhealthy: {channel.get('reason') or '?'}", style="red")
        )
        if channel.get("paused"):
            health.append(" (paused)", style="yellow")
        members = channel.get("members")
        channels.add_row(
            f"{name}\n{channel.get('provider')}:{channel.get('channel_id')}",
            health,
            _budget_use(channel),
            f"{channel.get('posts', 0)}/{channel.get('edits', 0)}",
            str(channel.get("queued", 0)),
            "-" if members is None else str(members),
        )
        for agent in channel.get("live", [])[:LIVE_SHOWN]:
            state = agent.get("outcome") or ("gone" if agent.get("gone") else agent.get("phase"))
            live.add_row(
                name, agent["agent"], agent["workspace"], state or "", agent.get("status", "")
            )
        hidden = channel.get("live_count", 0) - min(LIVE_SHOWN, len(channel.get("live", [])))
        if hidden > 0:
            live.add_row(name, f"… {hidden} more", "", "", "")
    ledger = Table(title="ledger rows by state")
    rows = status.get("ledger", {})
    for state in rows:
        ledger.add_column(state, justify="right")
    if rows:
        ledger.add_row(*(str(count) for count in rows.values()))
    return Group(heading, channels, live, ledger)


def _fetch(client: httpx.Client) -> dict[str, Any]:
    try:
        response = client.get("/v1/status")
    except httpx.HTTPError as exc:
        raise click.ClickException(
            f"cannot reach the gateway at {client.base_url}: {exc}; is `chatbridge run` serving?"
        ) from exc
    if response.status_code in (401, 403):
        raise click.ClickException(
            f"the gateway refused the token ({response.status_code}): pass --token or set "
            f"{TOKEN_ENV}"
        )
    if response.status_code != 200:
        raise click.ClickException(f"/v1/status answered {response.status_code}")
    body: dict[str, Any] = response.json()
    return body


@click.command("top")
@config_option
@click.option("--url", default=None, help="The gateway's API (default: from the config's [api]).")
@click.option("--token", envvar=TOKEN_ENV, default=None, help=f"Bearer token (or ${TOKEN_ENV}).")
@click.option("-n", "--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True)
@click.option("--once", is_flag=True, help="Print the dashboard once and exit.")
def command(
    config_path: Path | None, url: str | None, token: str | None, interval: float, once: bool
) -> None:
    """Watch a running gateway: channels, budget use, live messages, members, ledger rows."""
    if url is None:
        config = load_cli_config(config_path)
        host = "127.0.0.1" if config.api.host in ("0.0.0.0", "::", "") else config.api.host
        url = (
            f"http://[{host}]:{config.api.port}"
            if ":" in host
            else f"http://{host}:{config.api.port}"
        )
        if token is None and config.api.token is not None:
            token = config.api.token.get_secret_value()
    if token is not None and not token.isascii():
        raise click.BadParameter("must be ASCII (it goes in an HTTP header)", param_hint="--token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    console = Console()
    try:
        client = httpx.Client(base_url=url, headers=headers, timeout=5.0)
    except (httpx.InvalidURL, ValueError) as error:
        raise click.BadParameter(f"{url!r} is not a URL: {error}", param_hint="--url") from None
    with client:
        if once:
            console.print(render_status(_fetch(client)))
            return
        try:
            with Live(render_status(_fetch(client)), console=console, screen=False) as view:
                while True:
                    time.sleep(interval)
                    view.update(render_status(_fetch(client)))
        except KeyboardInterrupt:
            pass
