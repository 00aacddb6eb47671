"""Where a child that runs candidate code may write: its own folders, nothing else (Linux Landlock).

The compile and candidate children run the candidate's Python and native code as the worker's own
user, so file permissions alone would let it write anywhere the worker can: the shared cache
(another candidate's build, the light-build bridge, the kept baseline timings, the reference's
``torch.compile`` cache), the repository, the worker's home. Before any candidate code runs, such a
child restricts itself with Landlock (Linux 5.13 or later, no privileges needed): creating,
writing, truncating, renaming, linking and removing files is allowed only beneath the folders it is
given (its private working folder, its own build folder, ``/dev`` for the GPU's device files); reading
and executing stay allowed everywhere. The kernel enforces it for Python and native code alike, for
threads started later and for any process the child starts; it cannot be undone.

Landlock applies to the thread that asks and to what it starts afterwards, so a child confines itself
while it is the only thread it has (at its start, or before the candidate's code, whichever its role
allows: see ``child``). Where the kernel has no Landlock (or a container filters its system calls),
``confine_writes`` says so and the child goes on unconfined. ``KERNELCOURT_CONFINE=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable

# system call numbers: the same on every architecture (added after the tables were unified)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem rights (linux/landlock.h); reading (READ_FILE, READ_DIR) and EXECUTE are not handled
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR, _MAKE_DIR, _MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = (1 << i for i in range(6, 13))
_REFER = 1 << 13  # ABI 2: renaming and linking across folders
_TRUNCATE = 1 << 14  # ABI 3


def enabled() -> bool:
    return os.environ.get("KERNELCOURT_CONFINE", "1") != "0"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none."""
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _write_rights(abi: int) -> int:
    rights = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
              | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


def confine_writes(allowed: Iterable[str | os.PathLike[str]]) -> str:
    """Restrict this thread (and what it starts from now on) to writing beneath ``allowed``; missing
    folders are skipped. Returns what was done, for the child's log: ``"confined: ..."`` or
    ``"not confined: <why>"``. Never raises."""
    if not enabled():
        return "not confined: KERNELCOURT_CONFINE=0"
    abi = abi_version()
    if abi <= 0:
        return "not confined: this kernel has no Landlock"
    libc = _libc()
    rights = _write_rights(abi)
    attr = struct.pack("=Q", rights)  # struct landlock_ruleset_attr: handled_access_fs only
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"not confined: creating the rule set failed ({os.strerror(ctypes.get_errno())})"
    kept: list[str] = []
    try:
        for folder in allowed:
            path = os.fspath(folder)
            try:
                handle = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", rights, handle)  # struct landlock_path_beneath_attr (packed)
                rule_buffer = ctypes.create_string_buffer(rule, len(rule))
                if libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule_buffer,
                                ctypes.c_uint32(0)) < 0:
                    return f"not confined: a rule for {path} failed ({os.strerror(ctypes.get_errno())})"
                kept.append(path)
            finally:
                os.close(handle)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"not confined: no_new_privs failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) < 0:
            return f"not confined: restricting failed ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    threads = len(os.listdir("/proc/self/task"))
    extra = f"; {threads - 1} thread(s) started earlier are not" if threads > 1 else ""
    return f"confined (Landlock ABI {abi}): writes only beneath {', '.join(kept) or 'nothing'}{extra}"
