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
from collections.abc import Callable, Sequence
from typing import cast

from tether.content import Message

__all__ = ["FragmentCache"]


class FragmentCache:
    """``encode(message)``, memoized per message object while that object lives.

    ``encode`` returns the message's JSON text, or ``""`` for a message that
    is not sent. An entry is keyed by the message's ``id()`` and removed by a
    weak reference's callback as the message is freed, before its id can be
    reused: an id in the cache always names the message it was computed for,
    so a lookup needs no further check (and runs at C speed).
    """

    __slots__ = ("_encode", "_refs", "_texts")

    def __init__(self, encode: Callable[[Message], str]) -> None:
        self._encode = encode
        self._texts: dict[int, str] = {}
        self._refs: dict[int, weakref.ref[Message]] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def fragments(self, messages: Sequence[Message]) -> list[str]:
        """The encoding of each of ``messages``, in order; only new messages are encoded."""
        found = list(map(self._texts.get, map(id, messages)))
        if None in found:
            # New messages come last: start at the first one.
            for index in range(found.index(None), len(found)):
                if found[index] is None:
                    found[index] = self._add(messages[index])
        return cast(list[str], found)

    def _add(self, message: Message) -> str:
        key = id(message)
        known = self._texts.get(key)
        if known is not None:  # the same message twice in one request
            return known
        text = self._encode(message)
        texts, refs = self._texts, self._refs

        def forget(ref: weakref.ref[Message]) -> None:
            if refs.get(key) is ref:
                del refs[key], texts[key]

        refs[key] = weakref.ref(message, forget)
        texts[key] = text
        return text
