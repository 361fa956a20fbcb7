"""Send budgets in the configuration: a preset name, or a table of numbers over a preset.

``BudgetSpec`` is what a profile's (or a provider's settings') ``budget`` key holds, and
``resolve_budget`` turns it into the ``bridge_core.provider.SendBudget`` a channel's sender
paces by. Re-exported by ``bridge_core.config``; this module exists so that file stays one idea
(loading and validating the whole file) and so a provider's settings can use budgets without it.

The preset names are not the core's: plugins register them (the ``register_budget_presets``
hook) and the provider registry holds them. Validation checks a name against the presets handed
in the validation context (``budget_context(presets)``, as ``parse_config`` does), so an unknown
name is an error at its key; resolving it takes the same presets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    model_validator,
)

from bridge_core.provider import SendBudget, Window

__all__ = [
    "PRESETS_CONTEXT",
    "BudgetNumbers",
    "BudgetSpec",
    "PresetName",
    "StrictModel",
    "WindowSpec",
    "budget_context",
    "preset_named",
    "resolve_budget",
]


class StrictModel(BaseModel):
    """The base of every configuration table: unknown keys are errors."""

    # Each field's docstring is its description: the configuration reference in the docs shows
    # it, and a missing key's error quotes its first sentence (ADR 0062).
    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, use_attribute_docstrings=True
    )


PRESETS_CONTEXT = "budget_presets"
"""The key of the validation context that holds the known presets (name -> ``SendBudget``)."""


def budget_context(presets: Mapping[str, SendBudget]) -> dict[str, Any]:
    """The validation context under which a budget's preset name is checked against ``presets``
    (``Model.model_validate(data, context=budget_context(registry.budget_presets))``)."""
    return {PRESETS_CONTEXT: presets}


def preset_named(name: str, presets: Mapping[str, SendBudget]) -> SendBudget:
    """The preset ``name``; a ``ValueError`` naming it and the known presets when there is none."""
    try:
        return presets[name]
    except KeyError:
        known = ", ".join(sorted(presets)) or "none"
        raise ValueError(f"unknown budget preset {name!r}; expected one of {known}") from None


def _check_preset_name(value: str, info: ValidationInfo) -> str:
    presets = (info.context or {}).get(PRESETS_CONTEXT)
    # Without presets in the context (a model built by hand) the name is checked on resolving.
    if presets is not None:
        preset_named(value, presets)
    return value


PresetName = Annotated[str, AfterValidator(_check_preset_name)]
"""The name of a budget preset a plugin registered (``ProviderRegistry.budget_presets``)."""


class WindowSpec(StrictModel):
    """A sliding window: at most ``limit`` sends in any ``seconds``-long stretch of time."""

    limit: int = Field(ge=1)
    """Sends allowed in any one window. The sender waits rather than exceed it, however full the
    token bucket is."""
    seconds: float = Field(gt=0)
    """The window's length, in seconds. It slides: each send counts against the window for
    ``seconds`` after it was made."""


_HOUR = 3600.0


class BudgetNumbers(StrictModel):
    """A budget written out: a ``preset`` to start from and/or the numbers that replace its own.

    Without a preset, ``burst`` and one of ``per_second``/``per_hour`` are required; ``per_hour``
    alone also caps any 3,600 s window at that many sends.
    """

    preset: PresetName | None = None
    """The preset to start from: ``unlimited``, or one an installed plugin offers (``slack``,
    ``discord``, ``teams``, ``matrix``; ``chatbridge providers`` lists them). The other keys replace
    its numbers; without a preset, ``burst`` and a rate are required."""
    burst: int | None = Field(default=None, ge=1)
    """Sends allowed back to back: the token bucket's size. A full bucket lets this many go at once
    before the rate paces the rest; raise it only where the platform tolerates bursts. Not set: the
    preset's."""
    per_second: float | None = Field(default=None, gt=0)
    """Sustained sends per second: the bucket's refill rate. Give this or ``per_hour``, not both.
    It replaces the preset's rate and its hourly cap; the preset's shorter windows stay unless
    ``windows`` is given. Not set: the preset's."""
    per_hour: int | None = Field(default=None, ge=1)
    """Sustained sends per hour, for a platform with an hourly cap. The bucket refills at ``per_hour
    / 3600`` a second, and a 3,600 s window caps any hour at this many, which the bucket alone would
    overshoot by ``burst``. It replaces the preset's hourly cap; the preset's shorter windows stay
    unless ``windows`` is given."""
    windows: list[WindowSpec] | None = None
    """Sliding windows on top of the bucket, for a platform's short-term caps (Discord's 5 sends in
    5 s per channel) that the bucket alone would overshoot. Given, they replace the preset's
    windows. Not set: the preset's (its hourly cap only when the rate is the preset's too)."""
    edit_spacing: float | None = Field(default=None, ge=0)
    """Least seconds between two writes to one message (its post and each edit). A live message that
    changes faster shows only its latest state when its turn comes; raise it to edit less often. Not
    set: the preset's, or 2 s without a preset."""

    @model_validator(mode="after")
    def _complete(self) -> BudgetNumbers:
        if self.per_second is not None and self.per_hour is not None:
            raise ValueError("give per_second or per_hour, not both")
        if self.preset is None and (
            self.burst is None or (self.per_second is None and self.per_hour is None)
        ):
            raise ValueError("a budget without a preset needs burst and per_second or per_hour")
        return self

    def resolve(self, presets: Mapping[str, SendBudget]) -> SendBudget:
        """The ``SendBudget`` these numbers stand for, over ``presets[self.preset]`` if named."""
        base = preset_named(self.preset, presets) if self.preset is not None else None
        burst = self.burst if self.burst is not None else base.burst if base else 1
        spacing = (
            self.edit_spacing
            if self.edit_spacing is not None
            else (base.edit_spacing if base else 2.0)
        )
        windows: tuple[Window, ...]
        if self.windows is not None:
            windows = tuple(Window(w.limit, w.seconds) for w in self.windows)
        elif base is None:
            windows = ()
        elif self.per_hour is not None or self.per_second is not None:
            # A new rate replaces the preset's hourly cap (it is the preset's rate over an
            # hour); the preset's short windows (Discord's 5 in 5 s) are platform caps and stay.
            windows = tuple(w for w in base.windows if w.seconds < _HOUR)
        else:
            windows = base.windows
        if self.per_hour is not None:
            return SendBudget.hourly(
                burst=burst, per_hour=self.per_hour, edit_spacing=spacing, extra=windows
            )
        per_second = self.per_second if self.per_second is not None else base.per_second  # type: ignore[union-attr]
        return SendBudget(burst=burst, per_second=per_second, windows=windows, edit_spacing=spacing)


def _budget_kind(value: Any) -> str:
    return "budget-preset" if isinstance(value, str) else "budget-numbers"


# A tagged union: a string is only ever read as a preset name and a table only as numbers, so an
# error names one problem rather than one per union member.
BudgetSpec = Annotated[
    Union[  # noqa: UP007 - Annotated needs a runtime union here
        Annotated[PresetName, Tag("budget-preset")], Annotated[BudgetNumbers, Tag("budget-numbers")]
    ],
    Discriminator(_budget_kind),
]
"""A preset name (``"slack"``) or a ``BudgetNumbers`` table."""


def resolve_budget(
    spec: str | BudgetNumbers | None, default: SendBudget, *, presets: Mapping[str, SendBudget]
) -> SendBudget:
    """The ``SendBudget`` a spec stands for, or ``default`` when there is none; a preset name is
    looked up in ``presets`` (``ValueError`` naming the known ones when it is not there)."""
    if spec is None:
        return default
    if isinstance(spec, str):
        return preset_named(spec, presets)
    return spec.resolve(presets)
