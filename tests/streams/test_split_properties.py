"""``PartSplitter`` cuts a growing text exactly as ``split_reply`` cuts the whole text, for any
deltas over full Unicode (lone surrogates, NUL, platform tokens and mass mentions split across
deltas), in every length unit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.ledger import marker_headroom
from bridge_core.provider import LengthUnit
from bridge_core.runtime.streaming import split_reply
from bridge_core.streams import PartSplitter
from bridge_core.text import neutralise_mass_mentions, valid_text

PIECES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["<@U123>", "&amp;", "@everyone", "@", "every", "one", "\n", " ", "<", ">"]),
    st.sampled_from(["\ud83d", "\ude00", "\x00", "😀", "é"]),
    st.just("word " * 60),  # long enough that earlier parts settle and are reused
    st.sampled_from(["```", "```py\n", "\n```\n", "~~~", "e\u0301", "\U0001f1eb\U0001f1f7"]),
)


class Escaping:
    """A provider as far as ``split_reply`` sees one."""

    def __init__(self, max_length: int, unit: LengthUnit) -> None:
        from bridge_core.provider import Capabilities

        self.capabilities = Capabilities(edit=True, max_length=max_length, length_unit=unit)

    def escape(self, text: str) -> str:
        return neutralise_mass_mentions(text).replace("&", "&amp;")


@settings(max_examples=200, deadline=None)
@given(
    deltas=st.lists(PIECES, min_size=1, max_size=60),
    room=st.integers(min_value=12, max_value=60),  # room for one character in every unit
    unit=st.sampled_from(list(LengthUnit)),
)
def test_a_growing_text_is_cut_as_the_whole_text_is(
    deltas: list[str], room: int, unit: LengthUnit
) -> None:
    provider = Escaping(room + marker_headroom(unit), unit)
    splitter = PartSplitter(escape=provider.escape, max_length=room, unit=unit, clean=valid_text)
    text = ""
    for delta in deltas:
        text += delta
        assert splitter(text) == list(split_reply(valid_text(text), provider))  # type: ignore[arg-type]


def test_only_the_unsettled_tail_is_cut_again(monkeypatch) -> None:
    import bridge_core.streams.split as split_module

    seen: list[int] = []
    real = split_module.chunk

    def counting(text, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(split_module, "chunk", counting)
    splitter = PartSplitter(escape=lambda t: t, max_length=1000)
    text = ""
    for i in range(2000):
        text += f"token{i} "
        parts = splitter(text)
    assert "".join(parts) == text and len(parts) > 10
    assert max(seen[-100:]) < 2000  # the last calls cut about two parts, not the whole text
