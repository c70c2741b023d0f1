"""Small helpers to run a JVM service in the background with a pid file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something listens on ``port``. A connection to a port in the ephemeral range that
    nothing listens on can connect to itself (TCP self-connect: the kernel picked the same port as
    its source); that is no listener (chaos seed 1404: a registry's restart took its own probe for
    another process, and its readiness check read its own request back)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            return bool(s.getsockname() != s.getpeername())
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                return None
    except OSError:
        pass
    return pid


def start_background(cmd: list[str], log_file: Path, pid_file: Path, env: dict[str, str] | None = None,
                     cwd: Path | None = None) -> int:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})}, cwd=cwd,
        )
    pid_file.write_text(str(proc.pid))
    return proc.pid


def stop_pid(pid_file: Path, timeout: float = 30.0) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns whether a process was running."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and read_pid(pid_file) is not None:
        time.sleep(0.2)
    if read_pid(pid_file) is not None:
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    pid_file.unlink(missing_ok=True)
    return True
