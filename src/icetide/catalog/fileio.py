"""Catalog properties both Iceberg's Java FileIO and PyIceberg's FileIO understand.

Iceberg's Java ``S3FileIO`` and PyIceberg read the same keys for object storage (``s3.endpoint``,
``s3.access-key-id``, ``s3.path-style-access``, …). Only those pass to PyIceberg; Java-only keys
(``io-impl``, ``jdbc.*``, caching) stay with Spark.
"""

from __future__ import annotations

from collections.abc import Mapping

SHARED_PREFIXES = ("s3.", "gcs.", "adls.", "client.", "header.", "oauth2-server-uri", "scope", "audience",
                   "resource", "rest.", "py-io-impl")


def fileio_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k.startswith(SHARED_PREFIXES)}
