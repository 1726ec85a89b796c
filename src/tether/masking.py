"""URL credentials masked in whatever tether shows or stores.

A base URL may carry credentials (``http://user:password@host``).
:func:`mask_credentials` replaces them with ``***@`` wherever such a URL
reaches text that leaves tether's memory: log records (:class:`CredentialFilter`),
error messages, ``tether config show``, the events stored in a session log.
:func:`without_credentials` drops them from a URL tether records for later use
(a session header's base URL): a key is never stored, and neither is a password.

:func:`mask_secrets` goes further, for text that leaves tether for another
system (telemetry): URL credentials, strings shaped like API keys and bearer
tokens, and any of the secret values the caller names.
"""

from __future__ import annotations

import logging
import re

_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+@")

MASKED_CREDENTIALS = "***@"

MASKED = "***"

_TOKEN_SHAPED = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{35}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
    r"|(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{12,}"
)
MIN_SECRET = 8
"""Named secret values shorter than this are not masked (they would mask ordinary words)."""


def mask_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it (``user:pass@``) replaced by ``***@``."""
    if "@" not in text:
        return text
    return _CREDENTIALS.sub(lambda m: m.group("scheme") + MASKED_CREDENTIALS, text)


def mask_secrets(text: str, known: tuple[str, ...] = ()) -> str:
    """``text`` with URL credentials, API-key-shaped and bearer tokens, and each of the
    ``known`` secret values (those of at least :data:`MIN_SECRET` characters) replaced
    by ``***``."""
    for value in known:
        if len(value) >= MIN_SECRET and value in text:
            text = text.replace(value, MASKED)
    return _TOKEN_SHAPED.sub(MASKED, mask_credentials(text))


def without_credentials(url: str) -> str:
    """``url`` with its credentials (``user:pass@``) removed, for recording."""
    if "@" not in url:
        return url
    return _CREDENTIALS.sub(lambda m: m.group("scheme"), url)


class CredentialFilter(logging.Filter):
    """A handler filter that masks URL credentials in each record: message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_credentials(record.exc_text)
        return True
