"""torch's build baton, held only by a live process.

``torch.utils.cpp_extension`` serialises builds of one folder with a ``FileBaton``: the first process
creates ``<build dir>/lock`` and builds, the others wait for the file to disappear. A process killed
mid-build (a pool process, an evaluation past its time) never removes it, and every later build of
that source waits on it until its own time limit: an honest kernel turned into a ``timeout``. No age
says whether the builder is alive; the kernel does: ``LiveBaton`` holds an ``flock`` on the file,
which the kernel drops when its holder dies however it dies. A baton whose lock nobody holds was
left by a dead process and is taken over (the child's log says so). Installed in every child that
may build (``build.inline.install``), before any candidate code, in place of torch's own. A process
that waits for a live builder takes the baton after it and runs the (then empty) build itself, so
it never loads a build that its builder died in the middle of.
"""

from __future__ import annotations

import fcntl
import os
import sys


class LiveBaton:
    """What ``torch.utils.file_baton.FileBaton`` offers, on an ``flock`` (see the module)."""

    def __init__(self, lock_file_path: str, wait_seconds: float = 0.1, warn_after_seconds: float | None = None):
        self.lock_file_path = lock_file_path
        self.wait_seconds = wait_seconds
        self.warn_after_seconds = warn_after_seconds
        self.fd: int | None = None
        self.taken_from: str | None = None  # set: the baton was left by that process, no longer running

    def _lock(self, blocking: bool) -> bool:
        """Hold the flock of the file now at the path (created if missing)."""
        while True:
            created = True
            try:
                fd = os.open(self.lock_file_path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                created = False
                try:
                    fd = os.open(self.lock_file_path, os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # released meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                current = os.stat(self.lock_file_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if not current:  # its holder released it (removed the file) while we waited: take the next
                os.close(fd)
                continue
            if not created:
                owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown (torch's own baton)"
                self.taken_from = owner
                print(f"[kernelcourt] took over a build lock whose holder is gone (process {owner}): "
                      f"{self.lock_file_path}", file=sys.stderr, flush=True)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self.fd = fd
            return True

    def held(self) -> bool:
        """Whether a live process holds the baton now (a file left by a dead one is not held)."""
        try:
            fd = os.open(self.lock_file_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def try_acquire(self) -> bool:
        """Take the baton: at once when it is free or its holder is dead, else once its live holder
        has released it. Always True in the end, so torch then runs the build itself (ninja finds
        nothing left to do after a finished build, and finishes one that was cut short)."""
        return self._lock(blocking=True)

    def wait(self) -> None:
        """Until no live process holds the baton (torch calls it only when ``try_acquire`` failed)."""
        if self._lock(blocking=True):
            self.release()

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.lock_file_path)  # before the unlock: a waiter then sees the file gone
        except FileNotFoundError:
            pass
        os.close(self.fd)  # drops the flock
        self.fd = None


def install() -> None:
    """torch's builds in this process take ``LiveBaton`` in place of its ``FileBaton``."""
    from torch.utils import cpp_extension, file_baton

    cpp_extension.FileBaton = LiveBaton
    file_baton.FileBaton = LiveBaton
