"""Linux namespace, mount and capability calls a forked trial uses to isolate itself.

A warm worker runs inside the session's bubblewrap sandbox and forks one process per
trial. Bubblewrap gave the worker its view once; each trial then narrows that view for
itself with a nested user namespace (which gives it the capabilities to do so inside its
own namespaces only), and drops every capability before any trial code runs. These are
thin ``ctypes`` wrappers over the system calls; ``sandbox/zygote.py`` decides the order.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_LAST = 63
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def map_own_ids() -> None:
    """In a new user namespace, map our own uid and gid onto themselves (all an
    unprivileged process may map), so files keep their owners."""
    uid, gid = os.geteuid(), os.getegid()
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def tmpfs(target: str, read_only: bool = False) -> None:
    flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    mount("tmpfs", target, "tmpfs", flags, "mode=755")


def bind_fd(fd: int, target: str, read_only: bool) -> None:
    """Bind the directory or file open as ``fd`` (``O_PATH``) onto ``target``.

    Binding from a descriptor lets a path be shown again after a tmpfs hid its parent.
    """
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    if read_only:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def remount_read_only(target: str) -> None:
    mount(None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def loopback_up() -> None:
    """A new network namespace starts with ``lo`` down; bring it up (no other interface exists)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Give up every capability for good: bounding and ambient sets, then the process's own,
    and forbid regaining any through exec (set-uid files, file capabilities)."""
    for capability in range(CAP_LAST + 1):
        try:
            prctl(PR_CAPBSET_DROP, capability)
        except OSError:
            break  # past the last capability this kernel knows
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
