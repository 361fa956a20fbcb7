"""Generators of the documentation's reference blocks; ``docs/hooks.py`` wires them into mkdocs.

One module, one kind of source: ``config`` (the config models), ``code_tables`` (tables read from
the code), ``project`` (the ADRs, the CLI, the README); ``text`` has their shared helpers.
"""
