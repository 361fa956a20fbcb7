"""bridge_core.testing: the kit for testing bridge-core and its provider plugins.

- ``fake_platform``: ``FakePlatform``, a scriptable fake chat platform over real local HTTP;
- ``fake_slack``: ``FakeSlack``, the Slack Web API on top of it, and Events API signing;
- ``conformance``: ``ProviderConformance``, the suite every provider's tests subclass;
- ``pytest_plugin``: fixtures (``start_fake``, ``fake_platform``, ``fake_slack``), opted into
  with ``pytest_plugins = ["bridge_core.testing.pytest_plugin"]``;
- ``services``: real Redis and PostgreSQL for tests (skip locally, fail under CI).

Submodules are imported explicitly; importing this package imports nothing else.
"""
