"""The streamed-reply timeline on the concepts page, drawn from a real ``chatbridge simulate`` run.

``streaming_timeline()`` replays one streamed reply (120 deltas over 12 s, a rate limit at
4.5 s) through ``run_simulation`` on Slack's budget and draws what the channel saw, from the
run's transcript: the post, every edit, the refused send and the final, against the deltas.
"""

from __future__ import annotations

import tempfile
from html import escape
from pathlib import Path

__all__ = ["streaming_timeline"]

WIDTH, HEIGHT, LEFT, RIGHT = 760, 190, 40, 20


def streaming_timeline() -> str:
    from bridge_core.commands.simulate import (
        FALLBACK_BUDGETS,
        FALLBACK_CAPABILITIES,
        Fault,
        run_simulation,
    )
    from bridge_core.commands.simulate_streams import ReplyLine
    from bridge_core.notify import NotifyConfig
    from bridge_core.provider import RateLimited
    from bridge_core.testing.budget import read_transcript

    deltas = [(round(i * 0.1, 3), ReplyLine("r1", f"word{i} ", False)) for i in range(121)]
    items: list = [*deltas[:46], (4.5, Fault(RateLimited("429", retry_after=3.0))), *deltas[46:]]
    items.append((12.0, ReplyLine("r1", "", True)))
    with tempfile.TemporaryDirectory() as folder:
        transcript = Path(folder) / "transcript.jsonl"
        result = run_simulation(
            items,
            capabilities=FALLBACK_CAPABILITIES["slack"],
            budget=FALLBACK_BUDGETS["slack"],
            notify=NotifyConfig(),
            transcript=transcript,
        )
        entries = read_transcript(transcript)
    sends = result.replies["r1"]
    end = max(e.t for e in entries) + 1.0

    def x(t: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * t / end

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'role="img" aria-label="timeline of one streamed reply" '
        'style="max-width:100%;font-family:sans-serif;font-size:11px">',
        f'<line x1="{LEFT}" y1="150" x2="{WIDTH - RIGHT}" y2="150" stroke="#666"/>',
    ]
    for second in range(int(end) + 1):
        parts.append(
            f'<line x1="{x(second):.1f}" y1="150" x2="{x(second):.1f}" y2="155" stroke="#666"/>'
        )
        if second % 2 == 0:
            parts.append(
                f'<text x="{x(second):.1f}" y="168" text-anchor="middle">{second} s</text>'
            )
    for t, _ in deltas:
        parts.append(f'<line x1="{x(t):.1f}" y1="120" x2="{x(t):.1f}" y2="132" stroke="#bbb"/>')
    parts.append(f'<text x="{LEFT}" y="115" fill="#888">121 deltas from the agent</text>')
    writes = [e for e in entries if e.op in ("post", "edit")]
    last = writes[-1]
    for entry in entries:
        cx = x(entry.t)
        if entry.op == "error":
            red = 'text-anchor="middle" fill="#c0392b"'
            parts.append(f'<text x="{cx:.1f}" y="75" {red} font-size="16">&#215;</text>')
            parts.append(f'<text x="{cx:.1f}" y="40" {red}>429: pause 3 s</text>')
            continue
        final = entry is last
        color = "#27ae60" if final else ("#2c6fbb" if entry.op == "post" else "#e67e22")
        radius = 7 if final or entry.op == "post" else 5
        shown = escape(entry.text[-24:])
        parts.append(
            f'<circle cx="{cx:.1f}" cy="70" r="{radius}" fill="{color}">'
            f"<title>t={entry.t:g} s {entry.op}: …{shown}</title></circle>"
        )
    first = writes[0]
    parts.append(f'<text x="{x(first.t):.1f}" y="98" fill="#2c6fbb">post</text>')
    parts.append(
        f'<text x="{x(last.t):.1f}" y="98" text-anchor="end" fill="#27ae60">final edit</text>'
    )
    parts.append(
        f'<text x="{x(6):.1f}" y="98" text-anchor="middle" fill="#e67e22">edits, 2 s apart</text>'
    )
    parts.append("</svg>")
    caption = (
        f"Drawn when the site is built, from a real `run_simulation` of this reply on Slack's "
        f"budget: {sends.posts} post and {sends.edits} edits of one message (the last one the "
        f"final, {sends.final_after:g} s after the last delta), first text "
        f"{sends.first_text_after:g} s after the first delta; the rate limit at 4.5 s paused "
        "the channel and the edit after it showed the text of that moment. Hover a dot for "
        "its text."
    )
    return '<div class="streaming-timeline">\n' + "".join(parts) + "\n</div>\n\n" + caption + "\n"
