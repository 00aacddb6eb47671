"""Child processes for untrusted work: spawn, scrubbed environment, private pipes, limits.

Every phase that runs task or candidate code runs in a fresh ``python -m gpu_workers.child.main``
process with its own working directory and a scrubbed environment. Messages travel over a pair of
private pipes as length-prefixed ``torch.save`` payloads, read back with ``weights_only=True`` (so a
hostile child can send tensors and plain data, never code). The child's stdout and stderr go to a
log file that is only ever shown, never parsed. Every child has a keeper (``keeper``): the subreaper
of whatever the child starts, which ends the child's whole tree and removes its folder before the
child's exit status reaches us.
"""

from __future__ import annotations

import hmac
import mmap
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import keeper, wire
from .wire import write_all

if TYPE_CHECKING:
    from .gpuslot import GpuSlot

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

# Variables a child may inherit; everything else (API keys, database URLs, tokens) is dropped.
_ENV_KEEP = (
    "PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CC", "CXX",
    "NVCC_CCBIN", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR", "VIRTUAL_ENV",
)


# While a child works under a shared GPU slot, the parent looks this often whether a timer waits (a
# non-blocking lock try): a timer waits about this long for each holder in the middle of a stretch.
PREEMPT_POLL_S = 0.005
STOP_SETTLE_S = 0.2  # the longest the parent waits for a stopped tree to show as stopped


class ChildError(RuntimeError):
    """The child broke the protocol, died, or ran out of time."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout" | "exited" | "protocol" | "memory"


def widen_pipe(fd: int) -> None:
    """Raise a pipe's buffer from 64 KiB to the system's maximum (1 MiB by default): large outputs
    then cross in a few big reads instead of thousands of small ones."""
    try:
        import fcntl

        with open("/proc/sys/fs/pipe-max-size", encoding="ascii") as handle:
            size = int(handle.read().strip())
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), min(size, 16 << 20))
    except (OSError, ValueError):
        pass


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def system_oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has ended since boot (/proc/vmstat);
    None where the system does not say."""
    try:
        with open("/proc/vmstat", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system) a live process has used so far, with those of the descendants
    it has already reaped (a compile child's compilers); None once it is gone or on a system without
    /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds every thread of a process has run so far (``schedstat``: finer than
    ``cpu_seconds``' clock ticks); None once gone."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                    total += int(handle.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
    except OSError:
        return None
    return total


def thread_clock(pid: int) -> tuple[float, float, int] | None:
    """A process's main thread as the kernel accounts it: seconds on a CPU, seconds runnable but
    waiting for one (``schedstat``), and how many times it gave its CPU up by blocking
    (``voluntary_ctxt_switches``); None without /proc. While the thread never blocks, the first two
    together are exactly the wall-clock time that passed, whenever they are read."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", encoding="ascii") as handle:
            on_cpu, waiting = (int(v) / 1e9 for v in handle.read().split()[:2])
        with open(f"/proc/{pid}/task/{pid}/status", encoding="ascii") as handle:
            blocked = next(int(line.split()[1]) for line in handle if line.startswith("voluntary_ctxt_switches"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return on_cpu, waiting, blocked


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
    log_fd: int = -1  # the log, open for reading: its keeper removes the folder once the child has ended
    mac_key: bytes | None = None  # set: every message from the child must carry a valid HMAC
    log_offset: int = 0  # log_tail shows only what came after it (a reference child serves many evaluations)
    # Set: while waiting for a message, its tree is counted too (every 0.1 s), and the first
    # processes found running beside the child are kept in strays_seen.
    watch_strays: bool = False
    strays_seen: list[int] = field(default_factory=list)
    # The GPU slot this child works under while the parent waits for its messages: held shared, the
    # child is stopped whenever a timer waits (``yield_to_timers``), and the waiting polls for that.
    gpu_slot: GpuSlot | None = None
    # seconds it was kept stopped for other evaluations' timings, not its own (GpuSlot.step_aside)
    stopped_s: float = 0.0
    _extension: float = 0.0  # of that, what the message being received has waited
    _buffer: bytearray = field(default_factory=bytearray)
    _eof: bool = False
    _closed: bool = False
    _oom_kills: int | None = field(default_factory=system_oom_kills)  # the system's count when it started
    _cpu_seen: float | None = None  # its CPU seconds when last read (see ``cpu_seconds``)

    # --- sending -------------------------------------------------------------------------
    def send(self, obj: Any) -> threading.Thread:
        """Send in a thread: a hostile child that never reads cannot block the parent."""
        parts = wire.encode_parts(obj)

        def pump() -> None:
            try:
                write_all(self.to_child, parts)
            except OSError:
                pass  # the child died; the reader side reports it

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        return thread

    def signal(self, byte: bytes = b"g") -> None:
        """One byte to a child waiting on its input (its go for a timing); a dead child is ignored."""
        try:
            os.write(self.to_child, byte)
        except OSError:
            pass

    # --- receiving -----------------------------------------------------------------------
    def _wait_readable(self, deadline: float, next_rss_check: list[float]) -> bool:
        """Wait up to 0.25 s for data (``PREEMPT_POLL_S`` while the child works under a shared GPU
        slot, stepping aside for a waiting timer); enforce the deadline, less the time the child was
        kept stopped, and (at most every 0.1 s) the memory limit."""
        if self._eof:
            raise ChildError("exited", self._exit_description())
        poll = 0.25
        if self.gpu_slot is not None and self.gpu_slot.holding_shared:
            poll = PREEMPT_POLL_S
            stopped = self.yield_to_timers()
            self.stopped_s += stopped
            self._extension += stopped
        deadline += self._extension
        now = time.monotonic()
        if deadline - now <= 0:
            raise ChildError("timeout", f"no answer from the {self.role} process in time")
        ready, _, _ = select.select([self.from_child], [], [], min(deadline - now, poll))
        if (self.memory_limit_bytes or self.watch_strays) and now >= next_rss_check[0]:
            next_rss_check[0] = now + 0.1  # /proc reads are not free: not once per chunk of a large message
            if self.watch_strays and not self.strays_seen:
                self.strays_seen = self.strays()
            if self.memory_limit_bytes and rss_bytes(self.proc.pid) > self.memory_limit_bytes:
                raise ChildError("memory", f"the {self.role} process exceeded the memory limit "
                                           f"of {self.memory_limit_bytes >> 20} MiB")
        return bool(ready)

    def _fill(self, want: int, deadline: float) -> None:
        """Buffer at least ``want`` bytes (small pieces: counts, the skeleton, the tag)."""
        next_rss_check = [0.0]
        while len(self._buffer) < want:
            if not self._wait_readable(deadline, next_rss_check):
                continue
            chunk = os.read(self.from_child, 4 << 20)
            if not chunk:
                self._eof = True
                continue
            self._buffer.extend(chunk)

    def _take(self, size: int, deadline: float) -> bytes:
        self._fill(size, deadline)
        with memoryview(self._buffer) as view:
            data = bytes(view[:size])
        del self._buffer[:size]
        return data

    def _read_raw(self, size: int, deadline: float) -> bytearray | mmap.mmap:
        """A large buffer, read straight into place (what was buffered first, then readv)."""
        out = wire.raw_buffer(size)
        have = min(size, len(self._buffer))
        out[:have] = self._buffer[:have]
        del self._buffer[:have]
        next_rss_check = [0.0]
        with memoryview(out) as view:
            while have < size:
                if not self._wait_readable(deadline, next_rss_check):
                    continue
                got = os.readv(self.from_child, [view[have:]])
                if got == 0:
                    self._eof = True
                    continue
                have += got
        return out

    def recv(self, deadline: float, max_bytes: int | None = None) -> dict[str, Any]:
        """One message. Without ``max_bytes``, at most 8 GiB or the child's own memory limit, whichever
        is larger: a message can hold no more than the child may (a GPU-sized task's outputs)."""
        if max_bytes is None:
            max_bytes = max(8 << 30, self.memory_limit_bytes or 0)
        self._extension = 0.0
        try:
            head = self._take(wire.COUNTS.size, deadline)
            skeleton_len, count = wire.read_counts(head, max_bytes)
            lengths_raw = self._take(wire.WORD.size * count, deadline)
            lengths = wire.read_lengths(lengths_raw, count, skeleton_len, max_bytes)
        except wire.FormatError as exc:
            raise ChildError("protocol", f"the {self.role} process {exc}") from None
        skeleton = self._take(skeleton_len, deadline)
        raws = [self._read_raw(n, deadline) for n in lengths]
        if self.mac_key:
            tag = self._take(wire.MAC_SIZE, deadline)
            expected = wire.mac(self.mac_key, [head, lengths_raw, skeleton, *raws])
            if not hmac.compare_digest(tag, expected):
                raise ChildError("protocol", f"a message from the {self.role} process failed authentication "
                                             "(it did not come from the judge)")
        try:
            message = wire.build(skeleton, raws)
        except Exception as exc:  # noqa: BLE001 - hostile bytes
            raise ChildError("protocol", f"unreadable message from the {self.role} process: {exc}") from None
        if not isinstance(message, dict):
            raise ChildError("protocol", f"the {self.role} process sent a {type(message).__name__}")
        self.cpu_seconds()  # it may end right after its last message, and its zygote or keeper reap it
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

    # --- stepping aside for timings -------------------------------------------------------
    def yield_to_timers(self) -> float:
        """Mid-stretch under a shared GPU slot: if a timer waits, the child's whole tree is stopped,
        the GPU let go, and the child goes on once its slot is shared again (``GpuSlot.step_aside``).
        Returns the seconds it was stopped that are not its own time (0 when no timer waited)."""
        if self.gpu_slot is None:
            return 0.0
        return self.gpu_slot.step_aside(self.stop_tree, self.continue_tree)

    def tree(self) -> set[int]:
        """The child and every process below its keeper (or below it, without one)."""
        keeper_pid = getattr(self.proc, "keeper", None)
        return {self.proc.pid} | keeper.descendants(keeper_pid if keeper_pid is not None else self.proc.pid)

    def stop_tree(self) -> list[int]:
        """Stop the child and every process of its tree (its descendants, the orphans its keeper
        adopted; never the keeper): SIGSTOP cannot be caught or ignored, so nothing of it runs, or
        launches GPU work, until ``continue_tree``. Walked again until a walk finds nothing new (a
        process forked while the tree was walked); returns the processes stopped, once each of them
        shows as stopped (or ended): a signal is delivered at once but acted on when the process is
        next scheduled, and a grandchild still running could launch GPU work under a timer."""
        if self.proc.poll() is not None:
            return []
        stopped: list[int] = []
        for _ in range(8):
            new = [pid for pid in sorted(self.tree() - set(stopped)) if keeper.running(pid)]
            if not new:
                break
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except (ProcessLookupError, PermissionError):
                    continue
                stopped.append(pid)
        until = time.monotonic() + STOP_SETTLE_S
        pending = stopped
        while pending and time.monotonic() < until:
            pending = [pid for pid in pending if keeper.state(pid) not in (None, "T", "t", "Z", "X")]
            if pending:
                time.sleep(0.0005)
        return stopped

    def continue_tree(self, stopped: list[int]) -> None:
        """Let the processes ``stop_tree`` stopped go on (those still there)."""
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass

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
            before, now = self._oom_kills, system_oom_kills()
            if -code == signal.SIGKILL and before is not None and now is not None and now > before:
                # not ours (our kills end in a timeout or memory error first): the host ran out of memory
                return (f"the {self.role} process was killed by signal {name}: the system's out-of-memory "
                        f"killer ended {now - before} process(es) meanwhile, so the host ran out of memory "
                        "(the evaluations running at once may need more than this machine has)")
            return f"the {self.role} process was killed by signal {name}"
        return f"the {self.role} process exited early with code {code} before the evaluation finished"

    def cpu_seconds(self) -> float | None:
        """The child's CPU seconds so far (see ``cpu_seconds``). Once it has exited, those it had
        used when its last message came (a reaped child's /proc entry is gone at once); None if it
        was never read."""
        if self.proc.poll() is None:
            now = cpu_seconds(self.proc.pid)
            if now is not None:
                self._cpu_seen = now
        return self._cpu_seen

    def alive(self) -> bool:
        """Not closed by us, its channel open, its process running."""
        return not self._closed and not self._eof and self.proc.poll() is None

    def start_log_here(self) -> None:
        """From now on the log shows only what comes next (the earlier evaluation's lines are not this one's)."""
        try:
            self.log_offset = os.fstat(self.log_fd).st_size if self.log_fd >= 0 else self.log_path.stat().st_size
        except OSError:
            self.log_offset = 0

    def _read_log(self) -> bytes:
        if self.log_fd < 0:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_offset)
                return handle.read()
        parts, offset = [], self.log_offset
        while chunk := os.pread(self.log_fd, 1 << 20, offset):
            parts.append(chunk)
            offset += len(chunk)
        return b"".join(parts)

    def strays(self) -> list[int]:
        """Running processes of this child's tree besides the child (what candidate code started and
        left running: its descendants, and orphans its keeper adopted)."""
        keeper_pid = getattr(self.proc, "keeper", None)
        if keeper_pid is None:
            return sorted(p for p in keeper.descendants(self.proc.pid) if keeper.running(p))
        return keeper.strays(keeper_pid, self.proc.pid)

    def log_tail(self, limit: int = 8000) -> str:
        try:
            data = self._read_log()
        except OSError:
            return ""
        text = data[-limit:].decode("utf-8", errors="replace")
        return ("…" + text) if len(data) > limit else text

    def kill(self) -> None:
        """Kill the child and its group; its keeper then ends the rest of its tree before the child's
        exit status comes back (so, once ``wait`` returns, nothing of it runs)."""
        if self.proc.poll() is None:  # once reaped, its pid may be another process's
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self, wait_s: float = 10.0) -> int | None:
        """Wait briefly for a clean exit, then kill the whole process group; returns the exit code.
        Idempotent: a second call must not close descriptor numbers another thread now owns."""
        if self._closed:
            return self.proc.returncode
        self._closed = True
        try:
            code = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()  # also reaps anything the child left behind in its group
        for fd in (self.to_child, self.from_child, self.log_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.owns_workdir:  # its keeper removed it already, unless candidate code killed the keeper
            keeper.remove_tree(self.workdir)
        return code

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait_s=0.5 if exc[0] else 10.0)


class KeptProcess:
    """The parts of ``subprocess.Popen`` the sandbox uses, for a child started with ``python -m``
    under its keeper (itself a ``python -m`` process): ``pid`` is the child's, the status the
    keeper's, which mirrors the child's once its whole tree has ended."""

    def __init__(self, keeper_proc: subprocess.Popen, pid: int):
        self._keeper = keeper_proc
        self.pid = pid
        self.keeper = keeper_proc.pid
        self.args = keeper_proc.args

    @property
    def returncode(self) -> int | None:
        return self._keeper.returncode

    def poll(self) -> int | None:
        return self._keeper.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._keeper.wait(timeout=timeout)


def _start(role: str, env: dict[str, str], workdir: Path, fds: tuple[int, int], log: Any, remove: bool) -> Any:
    """A child started with ``python -m`` under a keeper started with ``python -m``."""
    report_r, report_w = os.pipe()
    program = [sys.executable, "-s", "-u", "-m", "gpu_workers.child.main", role, str(fds[0]), str(fds[1])]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-u", "-m", "gpu_workers.sandbox.keeper", str(report_w),
             str(workdir) if remove else "", "--", *program],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(*fds, report_w), start_new_session=True, close_fds=True,
        )
    finally:
        os.close(report_w)
    pid = keeper.read_report(report_r)
    if pid is None:
        proc.kill()
        proc.wait()
        raise ChildError("exited", f"the {role} process's keeper did not start it")
    return KeptProcess(proc, pid)


def _fork(role: str, env: dict[str, str], workdir: Path, fds: tuple[int, int, int], remove: bool) -> Any:
    """The child forked from this worker's zygote (torch already imported), or None: then it is
    started with ``python -m`` (see ``zygote``)."""
    from . import zygote

    forker = zygote.zygote_for(scrubbed_env({k: env[k] for k in zygote.FROM_CHILD_ENV if k in env}))
    if forker is None:
        return None
    try:
        return forker.fork(role, env, workdir, fds, remove)
    except zygote.ZygoteError as exc:
        print(f"[kernelcourt] {role} child started with python -m: {exc}", file=sys.stderr, flush=True)
        return None


def spawn(role: str, *, env_extra: dict[str, str] | None = None, memory_limit_mb: int = 0,
          address_space_limit: bool = False, workdir: Path | None = None) -> Child:
    """Start ``gpu_workers.child.main ROLE`` in a new session with private pipes: forked from the zygote,
    or ``python -m``."""
    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"kc-{role}-")) if workdir is None else workdir
    log_path = workdir / f"{role}.log"
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    widen_pipe(from_child_r)
    widen_pipe(to_child_w)
    limit = memory_limit_mb * (1 << 20) if memory_limit_mb else 0
    env = scrubbed_env(env_extra)
    env["HOME"] = str(workdir)
    env["TMPDIR"] = str(workdir)
    env["KA_ADDRESS_LIMIT"] = str(limit if address_space_limit else 0)
    log_fd = -1
    try:
        with open(log_path, "wb") as log:
            log_fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
            proc = _fork(role, env, workdir, (to_child_r, from_child_w, log.fileno()), owns)
            if proc is None:
                proc = _start(role, env, workdir, (to_child_r, from_child_w), log, owns)
    except BaseException:
        for fd in (to_child_w, from_child_r, log_fd):
            if fd >= 0:
                os.close(fd)
        if owns:
            keeper.remove_tree(workdir)
        raise
    finally:
        os.close(to_child_r)
        os.close(from_child_w)
    return Child(role, proc, to_child_w, from_child_r, workdir, log_path, limit, owns, log_fd=log_fd)
