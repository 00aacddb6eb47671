"""Child processes for untrusted work: spawn, scrubbed environment, private pipes, limits.

Every phase that runs task or candidate code runs in a fresh ``python -m gpu_workers._child``
process with its own working directory and a scrubbed environment. Messages travel over a pair of
private pipes as length-prefixed ``torch.save`` payloads, read back with ``weights_only=True`` (so a
hostile child can send tensors and plain data, never code). The child's stdout and stderr go to a
log file that is only ever shown, never parsed.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("!Q")
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

# Variables a child may inherit; everything else (API keys, database URLs, tokens) is dropped.
_ENV_KEEP = (
    "PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CC", "CXX",
    "NVCC_CCBIN", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR", "VIRTUAL_ENV",
)


class ChildError(RuntimeError):
    """The child broke the protocol, died, or ran out of time."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout" | "exited" | "protocol" | "memory"


MAC_SIZE = 32


def mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def encode_parts(obj: Any, key: bytes | None = None, save: Any = None) -> list[memoryview | bytes]:
    """Header, payload and (with a key) HMAC as separate pieces: no copy of a large payload."""
    if save is None:
        import torch

        save = torch.save
    buffer = io.BytesIO()
    save(obj, buffer)
    payload = buffer.getbuffer()
    parts: list[memoryview | bytes] = [_HEADER.pack(len(payload)), payload]
    if key:
        parts.append(mac(key, payload))
    return parts


def decode(payload: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")


def _write_all(fd: int, parts: list[memoryview | bytes]) -> None:
    for part in parts:
        view = memoryview(part)
        while view:
            written = os.write(fd, view)
            view = view[written:]


def write_message(fd: int, obj: Any, key: bytes | None = None, save: Any = None) -> None:
    _write_all(fd, encode_parts(obj, key, save))


def read_exact(fd: int, size: int) -> bytes:
    """Blocking read used inside children."""
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> Any:
    (size,) = _HEADER.unpack(read_exact(fd, _HEADER.size))
    return decode(read_exact(fd, size))


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {key: os.environ[key] for key in _ENV_KEEP if key in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONPATH"] = PACKAGE_ROOT
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "random"
    if extra:
        env.update(extra)
    return env


@dataclass
class Child:
    """A running child and the parent's ends of its pipes."""

    role: str
    proc: subprocess.Popen
    to_child: int
    from_child: int
    workdir: Path
    log_path: Path
    memory_limit_bytes: int
    owns_workdir: bool = True
    mac_key: bytes | None = None  # set: every message from the child must carry a valid HMAC
    _buffer: bytearray = field(default_factory=bytearray)
    _eof: bool = False

    # --- sending -------------------------------------------------------------------------
    def send(self, obj: Any) -> threading.Thread:
        """Send in a thread: a hostile child that never reads cannot block the parent."""
        parts = encode_parts(obj)

        def pump() -> None:
            try:
                _write_all(self.to_child, parts)
            except OSError:
                pass  # the child died; the reader side reports it

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        return thread

    # --- receiving -----------------------------------------------------------------------
    def _fill(self, want: int, deadline: float, max_bytes: int) -> None:
        while len(self._buffer) < want:
            if self._eof:
                raise ChildError("exited", self._exit_description())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildError("timeout", f"no answer from the {self.role} process in time")
            ready, _, _ = select.select([self.from_child], [], [], min(remaining, 0.25))
            if self.memory_limit_bytes and _rss_bytes(self.proc.pid) > self.memory_limit_bytes:
                raise ChildError("memory", f"the {self.role} process exceeded the memory limit "
                                           f"of {self.memory_limit_bytes >> 20} MiB")
            if not ready:
                continue
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                self._eof = True
                continue
            self._buffer.extend(chunk)
            if len(self._buffer) > max_bytes + _HEADER.size + MAC_SIZE:
                raise ChildError("protocol", f"the {self.role} process sent more data than allowed")

    def recv(self, deadline: float, max_bytes: int = 8 << 30) -> dict[str, Any]:
        self._fill(_HEADER.size, deadline, max_bytes)
        (size,) = _HEADER.unpack(bytes(self._buffer[: _HEADER.size]))
        if size > max_bytes:
            raise ChildError("protocol", f"the {self.role} process announced a {size}-byte message")
        tail = MAC_SIZE if self.mac_key else 0
        self._fill(_HEADER.size + size + tail, deadline, max_bytes)
        payload = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
        tag = bytes(self._buffer[_HEADER.size + size : _HEADER.size + size + tail])
        del self._buffer[: _HEADER.size + size + tail]
        if self.mac_key and not hmac.compare_digest(tag, mac(self.mac_key, payload)):
            raise ChildError("protocol", f"a message from the {self.role} process failed authentication "
                                         "(it did not come from the judge)")
        try:
            message = decode(payload)
        except Exception as exc:  # noqa: BLE001 - hostile bytes
            raise ChildError("protocol", f"unreadable message from the {self.role} process: {exc}") from None
        if not isinstance(message, dict):
            raise ChildError("protocol", f"the {self.role} process sent a {type(message).__name__}")
        return message

    def pending_bytes(self, wait: float = 0.0) -> int:
        """Bytes the child sent beyond what was read (after it exits: forged extra messages)."""
        deadline = time.monotonic() + wait
        while not self._eof:
            remaining = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.from_child], [], [], remaining)
            if not ready:
                break
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                self._eof = True
                break
            self._buffer.extend(chunk)
        return len(self._buffer)

    # --- ending --------------------------------------------------------------------------
    def _exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the {self.role} process closed its channel but kept running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"the {self.role} process was killed by signal {name}"
        return f"the {self.role} process exited early with code {code} before the evaluation finished"

    def log_tail(self, limit: int = 8000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        text = data[-limit:].decode("utf-8", errors="replace")
        return ("…" + text) if len(data) > limit else text

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self, wait_s: float = 10.0) -> int | None:
        """Wait briefly for a clean exit, then kill the whole process group; returns the exit code."""
        try:
            code = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()  # also reaps anything the child left behind in its group
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait_s=0.5 if exc[0] else 10.0)


def spawn(role: str, *, env_extra: dict[str, str] | None = None, memory_limit_mb: int = 0,
          address_space_limit: bool = False, workdir: Path | None = None) -> Child:
    """Start ``python -m gpu_workers._child ROLE`` in a new session with private pipes."""
    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"ka-{role}-")) if workdir is None else workdir
    log_path = workdir / f"{role}.log"
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    limit = memory_limit_mb * (1 << 20) if memory_limit_mb else 0
    env = scrubbed_env(env_extra)
    env["HOME"] = str(workdir)
    env["TMPDIR"] = str(workdir)
    env["KA_ADDRESS_LIMIT"] = str(limit if address_space_limit else 0)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-u", "-m", "gpu_workers._child", role, str(to_child_r), str(from_child_w)],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(to_child_r, from_child_w), start_new_session=True, close_fds=True,
        )
    os.close(to_child_r)
    os.close(from_child_w)
    return Child(role, proc, to_child_w, from_child_r, workdir, log_path, limit, owns)
