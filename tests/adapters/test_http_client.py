"""The adapters' HTTP clients: one per scheme, certificates verified wherever TLS is used."""

from __future__ import annotations

import ssl

from tether.llm.adapters.http import HttpClient, HttpOptions


def ssl_context_of(client: object) -> ssl.SSLContext:
    context = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext)
    return context


async def test_https_is_verified_and_plain_http_skips_the_ca_bundle() -> None:
    http = HttpClient(HttpOptions())
    secure = http._get("https://api.example.com/v1/chat/completions")
    plain = http._get("http://127.0.0.1:8000/v1/chat/completions")
    assert secure is not plain
    assert http._get("https://other.example.com/v1") is secure
    assert http._get("http://localhost:11434/v1") is plain
    context = ssl_context_of(secure)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert not secure.follow_redirects and not plain.follow_redirects
    await http.aclose()
    assert secure.is_closed and plain.is_closed
    assert http._get("https://api.example.com/v1") is not secure
    await http.aclose()
