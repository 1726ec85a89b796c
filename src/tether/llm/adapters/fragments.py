"""The JSON of each message a conversation sends, encoded once.

An agent's conversation grows by appending: from one request to the next, the
messages already sent are the same objects (the loop derives only the events
appended since the last request). Encoding every message again for every
request would make each request cost as much as the whole conversation.
:class:`FragmentCache` keeps each message's encoding for as long as the
message itself lives, keyed by identity, so a request encodes only what is
new. Messages are immutable, so an encoding never goes stale.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from tether.llm.messages import Message

__all__ = ["FragmentCache"]


class FragmentCache:
    """``encode(message)``, memoized per message object while that object lives.

    ``encode`` returns the message's JSON text, or ``None`` for a message
    that is not sent; both are remembered.
    """

    __slots__ = ("_encode", "_entries")

    def __init__(self, encode: Callable[[Message], str | None]) -> None:
        self._encode = encode
        self._entries: dict[int, tuple[weakref.ref[Message], str | None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, message: Message) -> str | None:
        """The encoding of ``message``, computed on its first request only."""
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is message:
            return entry[1]
        fragment = self._encode(message)
        entries = self._entries

        def forget(ref: weakref.ref[Message]) -> None:
            # Called as the message is freed, before its id can be reused.
            current = entries.get(key)
            if current is not None and current[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(message, forget), fragment)
        return fragment
