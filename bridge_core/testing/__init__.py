"""bridge_core.testing: the kit for testing bridge-core and its provider plugins.

- ``fake_platform``: ``FakePlatform``, a scriptable fake chat platform over real local HTTP
  (routes, a record of every request, scripted faults: statuses, drops, slow answers);
- ``fake_slack``, ``fake_discord``, ``fake_teams``: the platforms' APIs on top of it;
  ``slack_events``: signed Slack Events API requests;
- ``conformance``: ``ProviderConformance``, the suite every provider's tests subclass;
- ``config_docs``: the rule that every config key has a description, for the core's models and
  any plugin's settings (the conformance suite runs it);
- ``pytest_plugin``: fixtures (``start_fake``, ``fake_platform``, ``fake_slack``), loaded
  automatically through the ``pytest11`` entry point wherever bridge-core is installed;
- ``budget``: an independent checker of a transcript against a send budget and edit spacing;
- ``burst``: the seed's scenario B through the real notifier and sender against a provider,
  on a compressed clock, returning what the sender asked of it (``run_scenario_b``);
- ``light_import``: proof that a plugin declares its provider type without importing its SDK
  (``plugin_load_report``);
- ``clock``: virtual time (trio's ``MockClock``) for I/O-free decision logic;
- ``services``: real Redis and PostgreSQL for tests (skip locally, fail under CI).

Submodules are imported explicitly; importing this package imports nothing else.
"""
