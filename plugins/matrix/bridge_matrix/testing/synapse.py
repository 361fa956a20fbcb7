"""A throw-away Synapse homeserver for tests: started in a temp folder, stopped at the end.

Synapse (``matrix-synapse``, AGPL-3.0) is a test-only dependency (``bridge-matrix[test]``): it is
never imported here, only started as a separate process (``python -m synapse.app.homeserver``),
so no distribution ever links against it. ``start_synapse`` writes a minimal ``homeserver.yaml``
(SQLite in the folder, one client listener on a free loopback port, no federation, a
registration shared secret for the admin register API, loose global rate limits so fixtures are
never throttled) and waits until ``/_matrix/client/versions`` answers.

The tight message rate limits a test needs are set per user through the admin API
(``override_ratelimit``): Synapse honours a non-zero per-user override for the event-sending
limiter, so one server serves both throttled and unthrottled users.

Exception hierarchy: ``SynapseError`` when the server cannot be started or refuses an admin or
client call the fixture needs (its message carries the server's answer or the log's tail).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "MatrixUser",
    "Synapse",
    "SynapseError",
    "free_port",
    "start_synapse",
    "synapse_installed",
]

SERVER_NAME = "bridge.test"
STARTUP_TIMEOUT = 90.0  # Synapse boots in ~10 s on an idle machine; CI machines are shared

# Every limit but rc_message is lifted out of the way: tests register users, create rooms and
# join them in bulk. rc_message stays at Synapse's documented default (0.2/s, burst 10) for
# users without an override, so an unconfigured user meets the real default.
_CONFIG = """\
server_name: "{server_name}"
pid_file: "{dir}/homeserver.pid"
public_baseurl: "http://127.0.0.1:{port}/"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{dir}/homeserver.db"
log_config: "{dir}/log.yaml"
media_store_path: "{dir}/media"
signing_key_path: "{dir}/signing.key"
registration_shared_secret: "{secret}"
macaroon_secret_key: "{macaroon}"
form_secret: "{form}"
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
enable_metrics: false
bcrypt_rounds: 4
presence:
  enabled: false
url_preview_enabled: false
rc_message:
  per_second: 0.2
  burst_count: 10
rc_registration: {{per_second: 1000, burst_count: 1000}}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
  remote: {{per_second: 1000, burst_count: 1000}}
rc_joins_per_room: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
  per_issuer: {{per_second: 1000, burst_count: 1000}}
rc_room_creation: {{per_second: 1000, burst_count: 1000}}
rc_admin_redaction: {{per_second: 1000, burst_count: 1000}}
"""

_LOG_CONFIG = """\
version: 1
formatters:
  plain: {{format: "%(asctime)s %(name)s %(levelname)s %(message)s"}}
handlers:
  file: {{class: logging.FileHandler, filename: "{dir}/homeserver.log", formatter: plain}}
root: {{level: WARNING, handlers: [file]}}
disable_existing_loggers: false
"""


class SynapseError(Exception):
    """The test homeserver could not be started, or refused a call the fixture made."""


def synapse_installed() -> bool:
    """Whether ``matrix-synapse`` can be started from this interpreter."""
    return importlib.util.find_spec("synapse") is not None


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class MatrixUser:
    """A registered account and one logged-in device of it."""

    user_id: str
    access_token: str = field(repr=False)
    device_id: str
    password: str = field(repr=False)

    @property
    def localpart(self) -> str:
        return self.user_id[1:].partition(":")[0]


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


@dataclass
class Synapse:
    """A running test homeserver and the admin calls tests need (blocking, via httpx)."""

    base_url: str
    directory: Path
    process: subprocess.Popen[bytes]
    shared_secret: str = field(repr=False)
    server_name: str = SERVER_NAME
    admin: MatrixUser | None = None
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30.0), repr=False)
    _txn: int = 0

    # ------------------------------------------------------------------ plumbing

    def call(
        self,
        method: str,
        path: str,
        *,
        user: MatrixUser | None = None,
        body: Any = None,
        params: dict[str, Any] | None = None,
        expect: int = 200,
    ) -> Any:
        """One client or admin API call; the parsed JSON answer, or ``SynapseError``."""
        headers = {"Authorization": f"Bearer {user.access_token}"} if user else {}
        response = self._http.request(
            method, self.base_url + path, json=body, params=params, headers=headers
        )
        if response.status_code != expect:
            raise SynapseError(
                f"Synapse answered {method} {path} with {response.status_code}: "
                f"{response.text[:500]}"
            )
        return response.json() if response.content else None

    def _admin(self) -> MatrixUser:
        if self.admin is None:
            self.admin = self.register("admin", admin=True)
        return self.admin

    # ------------------------------------------------------------------ accounts

    def register(
        self, localpart: str | None = None, *, admin: bool = False, password: str | None = None
    ) -> MatrixUser:
        """Register an account through the shared-secret admin API (a fresh localpart by
        default); returns it with the access token of its first device."""
        localpart = localpart or f"user-{secrets.token_hex(4)}"
        password = password or secrets.token_urlsafe(12)
        nonce = self.call("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        for part in (nonce, localpart, password):
            mac.update(part.encode())
            mac.update(b"\x00")
        mac.update(b"admin" if admin else b"notadmin")
        answer = self.call(
            "POST",
            "/_synapse/admin/v1/register",
            body={
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
        )
        return MatrixUser(
            user_id=answer["user_id"],
            access_token=answer["access_token"],
            device_id=answer["device_id"],
            password=password,
        )

    def login(self, user: MatrixUser, *, device_id: str | None = None) -> MatrixUser:
        """A new device (and access token) of ``user``."""
        body: dict[str, Any] = {
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": user.localpart},
            "password": user.password,
        }
        if device_id is not None:
            body["device_id"] = device_id
        answer = self.call("POST", "/_matrix/client/v3/login", body=body)
        return MatrixUser(user.user_id, answer["access_token"], answer["device_id"], user.password)

    def override_ratelimit(self, user: MatrixUser, *, per_second: int, burst: int) -> None:
        """Give ``user`` its own message rate limit (Synapse's ``rc_message`` for that user).

        The admin API takes whole numbers only, so an override is at least 1 message a second;
        a slower limit for everyone is the server's ``rc_message`` (``start_synapse``)."""
        self.call(
            "POST",
            f"/_synapse/admin/v1/users/{_quote(user.user_id)}/override_ratelimit",
            user=self._admin(),
            body={"messages_per_second": per_second, "burst_count": burst},
        )

    def lift_ratelimit(self, user: MatrixUser) -> None:
        """No message rate limit for ``user`` (Synapse reads a 0/0 override as "exempt")."""
        self.override_ratelimit(user, per_second=0, burst=0)

    # ------------------------------------------------------------------ rooms

    def create_room(self, owner: MatrixUser, *, invite: tuple[MatrixUser, ...] = ()) -> str:
        """A private room created by ``owner``; every ``invite``\\ d user joins it."""
        room_id: str = self.call(
            "POST",
            "/_matrix/client/v3/createRoom",
            user=owner,
            body={"preset": "private_chat", "invite": [u.user_id for u in invite]},
        )["room_id"]
        for member in invite:
            self.join(member, room_id)
        return room_id

    def join(self, user: MatrixUser, room_id: str) -> None:
        self.call("POST", f"/_matrix/client/v3/rooms/{_quote(room_id)}/join", user=user, body={})

    def invite(self, by: MatrixUser, room_id: str, user: MatrixUser) -> None:
        self.call(
            "POST",
            f"/_matrix/client/v3/rooms/{_quote(room_id)}/invite",
            user=by,
            body={"user_id": user.user_id},
        )

    def kick(self, by: MatrixUser, room_id: str, user: MatrixUser) -> None:
        self.call(
            "POST",
            f"/_matrix/client/v3/rooms/{_quote(room_id)}/kick",
            user=by,
            body={"user_id": user.user_id, "reason": "test"},
        )

    def send_text(
        self, user: MatrixUser, room_id: str, text: str, *, content: dict[str, Any] | None = None
    ) -> str:
        """Post ``text`` as ``user`` (a person typing); the new event's id."""
        self._txn += 1
        body = content or {"msgtype": "m.text", "body": text}
        path = (
            f"/_matrix/client/v3/rooms/{_quote(room_id)}/send/m.room.message/"
            f"fixture-{os.getpid()}-{self._txn}-{secrets.token_hex(3)}"
        )
        return str(self.call("PUT", path, user=user, body=body)["event_id"])

    def redact(self, user: MatrixUser, room_id: str, event_id: str) -> None:
        self._txn += 1
        self.call(
            "PUT",
            f"/_matrix/client/v3/rooms/{_quote(room_id)}/redact/{_quote(event_id)}/"
            f"fixture-{self._txn}",
            user=user,
            body={},
        )

    def history(self, user: MatrixUser, room_id: str) -> list[dict[str, Any]]:
        """Every event of the room visible to ``user``, oldest first (``/messages``, paged)."""
        events: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "f", "limit": 1000}
        while True:
            page = self.call(
                "GET",
                f"/_matrix/client/v3/rooms/{_quote(room_id)}/messages",
                user=user,
                params=params,
            )
            events.extend(page.get("chunk", []))
            if not page.get("chunk") or "end" not in page:
                return events
            params["from"] = page["end"]

    def messages_by(self, user: MatrixUser, room_id: str, sender: str) -> list[dict[str, Any]]:
        """The ``m.room.message`` events ``sender`` posted in the room that are not edits,
        oldest first, each with its current content (the latest edit applied)."""
        events = [e for e in self.history(user, room_id) if e["type"] == "m.room.message"]
        latest: dict[str, dict[str, Any]] = {}
        posts: list[dict[str, Any]] = []
        for event in events:
            if event.get("sender") != sender:
                continue
            relation = event.get("content", {}).get("m.relates_to", {})
            if relation.get("rel_type") == "m.replace":
                new = event["content"].get("m.new_content")
                if new is not None:
                    latest[relation["event_id"]] = new
                continue
            posts.append(event)
        return [
            {**event, "content": latest.get(event["event_id"], event["content"])} for event in posts
        ]

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and close the admin client."""
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def restart(self, *, timeout: float = STARTUP_TIMEOUT) -> None:
        """Stop the server and start it again on the same port and database: what it kept only
        in memory is gone (the HTTP transaction cache), what it stored is not."""
        self.stop()
        self._http = httpx.Client(timeout=30.0)
        self.process = _launch(self.directory / "homeserver.yaml", self.directory)
        self.wait_until_answering(timeout)

    def wait_until_answering(self, timeout: float) -> None:
        """Wait until ``/_matrix/client/versions`` answers; ``SynapseError`` (with the log's
        tail, the process stopped) when it exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                tail = (self.directory / "stdout.log").read_text(errors="replace")[-3000:]
                code = self.process.returncode
                self.stop()
                raise SynapseError(
                    f"Synapse exited with {code} while starting:\n{tail}\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.base_url + "/_matrix/client/versions", timeout=2).is_success:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SynapseError(
                    f"Synapse did not answer on {self.base_url} within {timeout:g} s:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        log = self.directory / "homeserver.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _signing_key() -> str:
    # Synapse's key file format: "<algorithm> <version> <unpadded base64 of the 32-byte seed>".
    seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


def start_synapse(
    directory: Path, *, port: int | None = None, timeout: float = STARTUP_TIMEOUT
) -> Synapse:
    """Start a homeserver with its state in ``directory`` and wait until it answers.

    Raises ``SynapseError`` (with the log's tail) when it exits or does not answer in
    ``timeout`` seconds; the process is stopped then.
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    secret = secrets.token_urlsafe(24)
    config = directory / "homeserver.yaml"
    config.write_text(
        _CONFIG.format(
            server_name=SERVER_NAME,
            dir=directory,
            port=port,
            secret=secret,
            macaroon=secrets.token_urlsafe(24),
            form=secrets.token_urlsafe(24),
        )
    )
    (directory / "log.yaml").write_text(_LOG_CONFIG.format(dir=directory))
    (directory / "signing.key").write_text(_signing_key())
    (directory / "media").mkdir(exist_ok=True)
    server = Synapse(
        base_url=f"http://127.0.0.1:{port}",
        directory=directory,
        process=_launch(config, directory),
        shared_secret=secret,
    )
    server.wait_until_answering(timeout)
    return server


def _launch(config: Path, directory: Path) -> subprocess.Popen[bytes]:
    with (directory / "stdout.log").open("ab") as output:  # the child keeps its own handle
        return subprocess.Popen(
            [sys.executable, "-m", "synapse.app.homeserver", "--config-path", str(config)],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=directory,
        )
