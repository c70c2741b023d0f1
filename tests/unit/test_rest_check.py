"""The REST catalog preflight: a refused token or missing credentials is one line naming the key."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from icetide.catalog.rest import check
from icetide.config.catalog import RestCatalog
from icetide.errors import ConfigError


class _Auth(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == "Bearer good"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"defaults": {}, "overrides": {}}' if ok else b'{"error": {}}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = HTTPServer(("127.0.0.1", 0), _Auth)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_good_token_passes(server: str) -> None:
    check(RestCatalog(type="rest", uri=server, token="good"))


def test_a_refused_token_names_the_key_and_never_shows_it(server: str) -> None:
    with pytest.raises(ConfigError) as e:
        check(RestCatalog(type="rest", uri=server, token="s3cr3t-expired"))
    assert str(e.value) == (f"catalog.token: the REST catalog at {server} refused the token (HTTP 401); give a "
                            "valid one (it may have expired)")
    assert "s3cr3t" not in str(e.value)


def test_no_credentials_where_some_are_needed(server: str) -> None:
    with pytest.raises(ConfigError, match=r"^catalog: the REST catalog at .* needs credentials \(HTTP 401\); set "
                                          r"catalog.token or catalog.credential"):
        check(RestCatalog(type="rest", uri=server))


def test_signed_and_oauth_catalogs_are_not_judged_by_an_unsigned_request(server: str) -> None:
    check(RestCatalog(type="rest", uri=server, properties={"rest.sigv4-enabled": "true"}))
    check(RestCatalog(type="rest", uri=server, credential="id:secret"))
