"""How the registry client reaches the registry (#40 item 6): a list of URLs fails over, mutual TLS
takes an encrypted key's password, a bearer token is read again from its environment variable when
the registry refuses it; config mistakes name the key and never show a secret. No JVM: scripted
registries on localhost."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from icetide import secrets
from icetide.config.loader import validate_config
from icetide.config.registry import SchemaRegistry
from icetide.errors import ConfigError
from icetide.ingest.formats.registry import RegistryClient, RegistryUnavailable

pytestmark = pytest.mark.unit
TLS = Path(__file__).parents[1] / "fixtures" / "tls"


def serve(answer: Any) -> tuple[str, list[tuple[str, str | None]], HTTPServer]:
    """A registry answering ``answer(path, authorization) -> (status, body)``; the requests it saw."""
    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            status, body = answer(self.path, self.headers.get("Authorization"))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", seen, server


@pytest.fixture
def servers() -> Iterator[list[HTTPServer]]:
    started: list[HTTPServer] = []
    yield started
    for s in started:
        s.shutdown()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


SCHEMA = {"schema": '{"type":"string"}'}


def test_a_list_of_urls_fails_over_and_keeps_the_one_that_answered(servers: list[HTTPServer]) -> None:
    busy, busy_seen, s1 = serve(lambda p, a: (503, {}))
    good, good_seen, s2 = serve(lambda p, a: (200, SCHEMA))
    servers += [s1, s2]
    dead = closed_port()
    slept: list[float] = []
    client = RegistryClient(SchemaRegistry(url=f"{dead}, {busy}/,{good}"), sleep=slept.append)
    assert client.schema(1) == SCHEMA and client.schema(2) == SCHEMA
    assert slept == []  # no outage: another URL answered at once
    assert [p for p, _ in busy_seen] == ["/schemas/ids/1"]  # asked once, then the answering one is kept
    assert [p for p, _ in good_seen] == ["/schemas/ids/1", "/schemas/ids/2"]
    # an answer that is the registry's word (404) is not asked of the others
    missing, missing_seen, s3 = serve(lambda p, a: (404, {"error_code": 40403}))
    servers.append(s3)
    client = RegistryClient(SchemaRegistry(url=f"{missing},{good}"), sleep=slept.append)
    with pytest.raises(LookupError):
        client.schema(3)
    assert len(missing_seen) == 1 and [p for p, _ in good_seen][-1] == "/schemas/ids/2"
    # none answers: the outage handling waits, then gives up naming every URL
    client = RegistryClient(SchemaRegistry(url=f"{dead},{busy}", max_wait_s=1), sleep=lambda s: None)
    with pytest.raises(RegistryUnavailable, match=f"{dead}, {busy} did not answer"):
        client.schema(4)


def test_urls_are_checked_one_by_one_and_credentials_in_any_of_them_are_refused_unshown() -> None:
    assert SchemaRegistry(url="http://a:8081/, https://b:8081/x").urls == ["http://a:8081", "https://b:8081/x"]
    with pytest.raises(ValueError, match=r"URL 2 of 2 is not an http\(s\) URL"):
        SchemaRegistry(url="http://a:8081,ftp://b")
    # a password shown by no message: with or without a scheme, with a comma inside (the review's three)
    for url in ("http://a:8081,https://user:hunter2-pw@b:8081", "svc:hunter2pw@host", "https://r1,svc:hunter2pw@r2",
                "https://svc:hun,ter2pw@r2"):
        shown = config_error({"url": url})
        assert "source.schema_registry.url: credentials in the URL are not sent" in shown, shown
        assert "hunter2" not in shown and "ter2pw" not in shown, shown
    shown = config_error({"url": "registry.internal:8081/secret-path"})
    assert "URL 1 of 1 is not an http(s) URL" in shown and "secret-path" not in shown, shown


def test_a_bearer_token_is_read_again_from_its_environment_variable_when_refused(
        servers: list[HTTPServer], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICETIDE_TEST_REGISTRY_TOKEN", "first-token-1")
    url, seen, server = serve(lambda p, a: (200, SCHEMA) if a == "Bearer second-token-2" else (401, {}))
    servers.append(server)
    client = RegistryClient(SchemaRegistry(url=url, bearer_token_env="ICETIDE_TEST_REGISTRY_TOKEN"))
    monkeypatch.setenv("ICETIDE_TEST_REGISTRY_TOKEN", "second-token-2")  # renewed while the run goes on
    assert client.schema(1) == SCHEMA
    assert [a for _, a in seen] == ["Bearer first-token-1", "Bearer second-token-2"]
    assert secrets.scrub("token second-token-2") == "token ***"  # never shown
    # a token the registry still refuses once read again is a config error naming the keys, asked twice at most
    monkeypatch.setenv("ICETIDE_TEST_REGISTRY_TOKEN", "first-token-1")
    refused = RegistryClient(SchemaRegistry(url=url, bearer_token_env="ICETIDE_TEST_REGISTRY_TOKEN"))
    with pytest.raises(ConfigError, match=r"refused the credentials .*bearer_token_env") as e:
        refused.schema(2)
    assert "first-token-1" not in str(e.value) and len(seen) == 3


def config_error(registry: dict[str, Any]) -> str:
    """What the config check says of a pipeline with ``registry`` as its schema_registry."""
    raw = {"name": "p", "source": {"bootstrap_servers": "k:9092", "topics": ["t"], "format": "avro",
                                    "schema_registry": registry},
           "catalog": {"type": "jdbc", "uri": "jdbc:sqlite:/tmp/c.db", "warehouse": "/tmp/w"},
           "target": {"table": "raw.t"}}
    with pytest.raises(ConfigError) as e:
        validate_config(raw, "p.yaml")
    return str(e.value)


def test_bearer_token_env_mistakes_fail_the_check_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ICETIDE_TEST_UNSET", raising=False)
    assert ("p.yaml: source.schema_registry.bearer_token_env: environment variable ICETIDE_TEST_UNSET is not set; "
            "export the registry's token in it") in config_error({"url": "http://r:8081",
                                                                  "bearer_token_env": "ICETIDE_TEST_UNSET"})
    shown = config_error({"url": "http://r:8081", "bearer_token_env": "eyJhbGciOi.secret-token-value"})
    assert "source.schema_registry.bearer_token_env: is not an environment variable's name" in shown
    assert "secret-token-value" not in shown
    monkeypatch.setenv("ICETIDE_TEST_SET", "t0ken-value")
    shown = config_error({"url": "http://r:8081", "bearer_token": "x-token-1", "bearer_token_env": "ICETIDE_TEST_SET"})
    assert "source.schema_registry.bearer_token_env: give one of bearer_token, bearer_token_env" in shown
    assert "x-token-1" not in shown and "t0ken-value" not in shown


def test_mutual_tls_takes_the_keys_password_and_a_wrong_one_names_the_key_unshown() -> None:
    cert, key = str(TLS / "client-cert.pem"), str(TLS / "client-key.pem")

    def client(**kw: Any) -> RegistryClient:
        return RegistryClient(SchemaRegistry(url="https://r:8081", certificate_location=cert, key_location=key, **kw))

    assert client(key_password="test-key-pw")._http.ssl is not None
    with pytest.raises(ConfigError, match=r"source\.schema_registry\.key_password: .*check key_password") as e:
        client(key_password="wrong-password-9")
    assert "wrong-password-9" not in str(e.value)
    with pytest.raises(ConfigError, match=r"source\.schema_registry\.key_password:"):
        client()  # an encrypted key and no password: named, not an interactive prompt
    shown = config_error({"url": "https://r:8081", "key_password": "pw-1234"})
    assert "source.schema_registry.key_password: is the password of key_location's private key" in shown
    assert "pw-1234" not in shown
    assert "pw-abcd" not in repr(SchemaRegistry(url="https://r:8081", key_location=key, key_password="pw-abcd"))


def _client(url: str) -> RegistryClient:
    return RegistryClient(SchemaRegistry(url=url, max_wait_s=120), sleep=lambda s: None)


SCHEMA = {"schema": '{"type": "string"}'}


def test_a_404_from_a_registry_that_no_longer_serves_ids_it_gave_is_waited_out(
        servers: list[HTTPServer]) -> None:
    """CI (stop 48's run): Apicurio, restarted after an outage, answered 404 for a registered id
    while it was still reading its storage; the records of that id became dead letters."""
    from icetide.ingest.formats.registry import UnknownSchemaId

    starting = {"left": 0}  # while > 0, every answer is a 404 (a registry starting up)

    def answer(path: str, auth: str | None) -> tuple[int, Any]:
        if starting["left"] > 0:
            starting["left"] -= 1
            return 404, {"error_code": 40403}
        return (200, SCHEMA) if path in ("/schemas/ids/1", "/schemas/ids/2") else (404, {"error_code": 40403})

    url, seen, server = serve(answer)
    servers.append(server)
    client = _client(url)
    assert client.schema(1) == SCHEMA
    starting["left"] = 2  # restarted: id 2's first answer and the witness's are 404s
    assert client.schema(2) == SCHEMA  # 404, the witness 404 too: asked again, then served
    assert [p for p, _ in seen].count("/schemas/ids/2") == 2, seen
    with pytest.raises(UnknownSchemaId):  # a registry serving id 1 is believed at once
        client.schema(3)
    assert [p for p, _ in seen][-2:] == ["/schemas/ids/3", "/schemas/ids/1"]


def test_a_deleted_witness_does_not_keep_a_true_404_waiting_for_ever(servers: list[HTTPServer]) -> None:
    """A witness answering 404 for ``max_wait_s`` is taken as deleted: later 404s are believed at once."""
    import time

    from icetide.ingest.formats.registry import UnknownSchemaId

    deleted = {"yes": False}

    def answer(path: str, auth: str | None) -> tuple[int, Any]:
        if path == "/schemas/ids/1" and not deleted["yes"]:
            return 200, SCHEMA
        return 404, {"error_code": 40403}

    url, seen, server = serve(answer)
    servers.append(server)
    client = RegistryClient(SchemaRegistry(url=url, max_wait_s=1), sleep=time.sleep)
    client.schema(1)
    deleted["yes"] = True  # id 1 hard-deleted since
    with pytest.raises(UnknownSchemaId):  # waited out up to max_wait_s, then believed
        client.schema(5)
    assert [p for p, _ in seen].count("/schemas/ids/5") == 2, seen
    assert client.outage_since is None  # the wait's outage is over: the next one raises its alert
    time.sleep(0.6)
    seen.clear()
    with pytest.raises(UnknownSchemaId):  # the witness's 404s have lasted max_wait_s: deleted, not asked again
        client.schema(6)
    assert [p for p, _ in seen] == ["/schemas/ids/6", "/schemas/ids/1"]
    seen.clear()
    with pytest.raises(UnknownSchemaId):
        client.schema(7)
    assert [p for p, _ in seen] == ["/schemas/ids/7"]
