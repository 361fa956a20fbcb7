"""The root of every error bridge-core raises on purpose, and the whole hierarchy in one picture.

Errors to catch at run time (each says what was wrong and what to do)::

    BridgeError
    ├── ConfigError              bridge_core.config: the config file cannot be used; fix the file
    ├── PluginError              bridge_core.plugins: a problem with the installed plugins
    │   ├── PluginLoadError        a plugin failed to import, register or validate (strict mode)
    │   ├── ProviderNameClash      two plugins registered one provider name
    │   └── UnknownProvider        no installed plugin offers that provider (also a LookupError)
    ├── ProviderError            bridge_core.provider: a platform call failed; the sender, the
    │   │                        notifier and the ledger read what to do from ``ERROR_TABLE``
    │   ├── RateLimited            not now; ``retry_after`` seconds when the platform said
    │   ├── NotFound               the message or thread is gone (an edit reposts)
    │   ├── Forbidden              the bot lost access; re-checked
    │   ├── Unreachable            permanent: blocked, deleted, revoked
    │   ├── MessageRejected        this one message is refused; the channel is fine
    │   └── TransportError         transient: network, timeout, 5xx
    │       ├── ConnectionLost       an inbound connection dropped
    │       └── SenderClosed         bridge_core.sending: the sender stopped before this work went
    ├── LedgerError              bridge_core.ledger: a store could not be opened or used
    │   └── ClaimLost              the row was claimed elsewhere while the reply waited its turn
    ├── OwnershipError           bridge_core.ownership
    │   ├── LogUnavailable         the conversation log's backend did not answer; retry
    │   └── NotAMember             the member left the group; join again as a new member
    ├── EventError               bridge_core.events: a fleet event that cannot be read (ValueError)
    ├── ProtocolError            bridge_core.agent: an agent-protocol message breaks the protocol
    │                            (also a ValueError)
    ├── AgentLoadError           bridge_core.runtime: the configured agent cannot be imported
    └── GatewayError             bridge_core.runtime: the gateway cannot start as configured

A signal, not an error (outside the tree, so ``except BridgeError`` never swallows it)::

    AgentBusy                    bridge_core.ownership: raised by an agent at capacity; the person
                                 gets a short busy notice

Programming errors are Python's own and are bugs to fix, not conditions to handle: a wrong
argument raises ``TypeError`` or ``ValueError``, a call in the wrong state (a second ``run()``, a
sender used after it stopped) raises ``RuntimeError``.

This module is part of the vocabulary: it imports nothing else of the project, so every package
may derive its errors from ``BridgeError``.
"""

from __future__ import annotations

__all__ = ["BridgeError"]


class BridgeError(Exception):
    """Base of every error bridge-core raises on purpose; see this module's docstring."""
