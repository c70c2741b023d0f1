"""Section ``catalog``: the Iceberg catalog (JDBC/SQLite embedded default, or REST)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from icetide.config.base import Strict


class JdbcCatalog(Strict):
    """Embedded default: Iceberg's JDBC catalog on a SQLite file plus a local warehouse folder."""

    type: Literal["jdbc"] = "jdbc"
    name: str = Field(default="icetide", description="Spark catalog name")
    uri: str = Field(default="jdbc:sqlite:.icetide/catalog.db", description="JDBC URL of the catalog DB")
    warehouse: str = Field(default=".icetide/warehouse", description="Warehouse folder or URI")
    user: str | None = None
    password: SecretStr | None = None
    properties: dict[str, str] = Field(default_factory=dict, description="Extra catalog properties")


class RestCatalog(Strict):
    """An Iceberg REST catalog (the production path)."""

    type: Literal["rest"]
    name: str = Field(default="icetide", description="Spark catalog name")
    uri: str = Field(description="REST catalog base URL, e.g. https://catalog.example.com/api")
    warehouse: str | None = Field(default=None, description="Warehouse name or location")
    credential: SecretStr | None = Field(default=None, description="OAuth2 client_id:client_secret")
    token: SecretStr | None = Field(default=None, description="Bearer token")
    properties: dict[str, str] = Field(default_factory=dict, description="Extra catalog properties")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s/]+", v):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v.rstrip("/")


CatalogConfig = Annotated[JdbcCatalog | RestCatalog, Field(discriminator="type")]
