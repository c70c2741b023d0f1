"""Section ``source.schema_registry``: where Avro writer schemas come from (a Confluent-compatible
registry: Confluent, Apicurio's ``/apis/ccompat/v7``, Karapace, Redpanda)."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from icetide.config.base import Strict, keyed


class SchemaRegistry(Strict):
    """A Confluent-compatible schema registry."""

    url: str = Field(description="Base URL of the Confluent-compatible API, e.g. http://registry:8081 "
                     "(Apicurio: http://host:8080/apis/ccompat/v7); several, comma-separated, fail over in turn "
                     "(the one that answered is kept); credentials go in basic_auth_user_info, never in the URL")
    basic_auth_user_info: SecretStr | None = Field(
        default=None, description="user:password for HTTP basic auth; write ${ENV_VAR} to read it from the environment")
    bearer_token: SecretStr | None = Field(
        default=None,
        description="Bearer token (instead of basic auth); write ${ENV_VAR} to read it from the environment")
    bearer_token_env: str | None = Field(
        default=None,
        description="Name of an environment variable holding the bearer token (instead of bearer_token): read at "
        "start and again whenever the registry refuses the token in use (401/403), so a token the process's "
        "environment renews is taken without a restart")
    ca_location: str | None = Field(default=None, description="CA certificate file to verify the registry's TLS")
    certificate_location: str | None = Field(default=None, description="Client certificate file (mutual TLS)")
    key_location: str | None = Field(default=None, description="Client private key file (mutual TLS)")
    key_password: SecretStr | None = Field(
        default=None, description="Password of the encrypted private key in key_location (mutual TLS); write "
        "${ENV_VAR} to read it from the environment")
    subject_name_strategy: Literal["topic_name", "record_name", "topic_record_name"] = Field(
        default="topic_name",
        description="How subjects are named: <topic>-value (topic_name), <record full name> (record_name), "
        "<topic>-<record full name> (topic_record_name); with record names one topic carries several record types",
    )
    semantic_types: Literal["convert", "raw"] = Field(
        default="convert",
        description="Kafka Connect and Debezium semantic types (connect.name): convert: each becomes the column "
        "type it means (io.debezium.time.MicroTimestamp a timestamp, Date a date, ZonedTimestamp a timestamp "
        "with zone, ...; see docs/formats.md); raw: the Avro type as written (a long of epoch microseconds)",
    )
    timeout_s: float = Field(default=10.0, gt=0, le=300, description="One request's timeout")
    max_wait_s: float = Field(
        default=600.0, ge=0,
        description="How long a batch waits for a registry that is down or slow (retrying with backoff) before "
        "the batch fails and the run restarts it; records are never dead-lettered for a registry outage",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if "@" in v:  # never echo it, whatever the scheme or commas: the part before @ may be a password
            raise ValueError("credentials in the URL are not sent: remove 'user:password@' from the url and "
                             "write them in basic_auth_user_info (as ${ENV_VAR})")
        urls = [u.strip().rstrip("/") for u in v.split(",")]
        for n, u in enumerate(urls, 1):
            if not re.match(r"^https?://[^\s/,]+", u):  # the text is not shown: it may hold a secret
                raise ValueError(f"URL {n} of {len(urls)} is not an http(s) URL (write http(s)://host:port; "
                                 "several URLs: comma-separated)")
        return ",".join(urls)

    @property
    def urls(self) -> list[str]:
        """The registry's URLs, in the order they are tried."""
        return self.url.split(",")

    @model_validator(mode="after")
    def _auth(self) -> SchemaRegistry:
        given = [k for k in ("basic_auth_user_info", "bearer_token", "bearer_token_env") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(keyed(given[1], f"give one of {', '.join(given)}: the registry takes one kind of "
                                   "credentials"))
        if self.bearer_token_env is not None:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.bearer_token_env):
                raise ValueError(keyed("bearer_token_env", "is not an environment variable's name: write the "
                                       "variable's name (REGISTRY_TOKEN), not ${...} and not the token"))
            if not os.environ.get(self.bearer_token_env):
                raise ValueError(keyed("bearer_token_env", f"environment variable {self.bearer_token_env} is not "
                                       "set; export the registry's token in it"))
        if self.key_password is not None and not self.key_location:
            raise ValueError(keyed("key_password", "is the password of key_location's private key: give "
                                   "key_location (and certificate_location) too"))
        return self
