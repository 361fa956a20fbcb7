"""Logging for the gateway: human-readable lines by default, one JSON object per line on request.

Secrets never reach a log: every handler installed here carries a ``SecretRedactor`` that
replaces each registered secret value (tokens, passwords inside store URLs) with ``***`` in the
rendered message, its arguments and any exception text, whatever logger produced the record.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, Literal, TextIO

__all__ = ["LogFormat", "JsonFormatter", "SecretRedactor", "configure_logging", "url_secrets"]

LogFormat = Literal["text", "json"]

_URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:([^@/]+)@", re.IGNORECASE)


def url_secrets(url: str) -> list[str]:
    """The password embedded in a store URL (``postgresql://user:pw@host``), if any."""
    match = _URL_PASSWORD.match(url)
    return [match.group(1)] if match else []


class SecretRedactor(logging.Filter):
    """Replaces every registered secret in a record with ``***`` before any handler formats it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        # Very short values would redact ordinary words; a real credential is never this short.
        self._secrets.update(s for s in secrets if s and len(s) >= 4)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` and any ``extra`` fields."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                plain = isinstance(value, (str, int, float, bool, type(None)))
                out[key] = value if plain else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    """``2026-12-01T08:15:51.123Z INFO    logger: message``: an ISO 8601 date and time in UTC,
    so lines from hosts in different zones, or either side of midnight, sort and compare."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def configure_logging(
    *,
    fmt: LogFormat = "text",
    level: int | str = logging.INFO,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
) -> SecretRedactor:
    """Install one handler on the root logger, replacing the handlers it had (the CLI's default).

    Returns the redactor so secrets learnt later (a profile's token) can be added to it.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter())
    redactor = SecretRedactor(secrets)
    handler.addFilter(redactor)
    root.addHandler(handler)
    root.setLevel(level)
    # aiohttp's access log is one line per request: too loud for a gateway taking event batches.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return redactor
