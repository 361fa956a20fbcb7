"""Jinja additions for the provider template (cookiecutter imports this from the template's
directory, listed in ``_extensions`` in cookiecutter.json).

bridge-core is on no package index, so the generated project's README must say where pip gets it
from. The template always sits in a bridge-core checkout (a local one, or the clone cookiecutter
makes of a git URL), so that checkout is the place: its absolute path, found from this file.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from jinja2 import Environment
from jinja2.ext import Extension

BRIDGE_CORE_CHECKOUT = Path(__file__).resolve().parent.parent


class BridgeCoreSource(Extension):
    """``{{ bridge_core_checkout }}``: the checkout's path; ``| shell_quote``: safe in a shell."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["bridge_core_checkout"] = str(BRIDGE_CORE_CHECKOUT)
        environment.filters["shell_quote"] = shlex.quote
