"""What the page shows of a record beyond the log's own data, computed once on the
server when the record is encoded (:class:`~tether.web.app.EncodedLogs`): the diff
of a call that changes a file, as numbered hunks (:mod:`tether.front.diffs`, the
diff the terminal prints), and an answer's Markdown as sanitized HTML
(:mod:`tether.web.markdown`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tether.content import TextBlock
from tether.front.diffs import hunks, line_in_file
from tether.session import AssistantMessageEvent
from tether.tools.presentation import ToolShown


def answer_html(message: AssistantMessageEvent) -> str | None:
    """The text of ``message`` rendered from Markdown (``None``: it has no text)."""
    text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
    if not text:
        return None
    from tether.web.markdown import to_html

    return to_html(text)


def call_diffs(
    shown: ToolShown, arguments: Mapping[str, object], cwd: str | None
) -> list[dict[str, object]]:
    """The diffs of the changes a call makes, as its tool declares them
    (:meth:`~tether.tools.presentation.ToolShown.changes`), each as
    :meth:`~tether.front.diffs.FileDiff.to_json`; none for a call that changes no file.
    Line numbers are the file's where the change is found in it (relative to
    ``cwd``), else counted from the change's first line."""
    pairs = shown.changes(arguments)
    if not pairs:
        return []
    places = shown.locations(arguments, cwd)
    path = places[0].path if places else None
    name = next((v for k in shown.paths if isinstance(v := arguments.get(k), str)), None)
    shown_path = name or (os.path.basename(path) if path else "")
    diffs: list[dict[str, object]] = []
    for old, new in pairs:
        first = line_in_file(path, old, new) if path is not None and old else None
        diffs.append(hunks(shown_path, old, new, first_line=first or 1).to_json())
    return diffs
