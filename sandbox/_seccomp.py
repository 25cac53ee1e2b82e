"""The seccomp profile every sandbox container runs under, shipped with the project.

Docker's own default profile is an allow-list of about 350 system calls, tied to the engine's version and not
available without a network. This profile is the other way round: everything is allowed except a deny-list.
That is safe here because seccomp is one layer of several: the container drops every capability
(``cap_drop=ALL``; the supervisor keeps SETUID, SETGID and SETPCAP only until it has started the program),
sets ``no-new-privileges``, has a read-only root and no network, and the program runs as a user of its own.
Most calls on Docker's deny-list already fail without a capability; they are denied here too, so that no
capability added by mistake can bring them back.

Denied, on top of that (each fails with ``EPERM``):

- reaching into another process: ``ptrace``, ``process_vm_readv``, ``process_vm_writev``, ``pidfd_getfd``,
  ``kcmp``. Same-user processes are the program's own; the supervisor runs as another user and is not
  dumpable, so even a profile that let these through would not reach it.
- new namespaces, which would hand the program a user namespace full of capabilities and a much larger kernel
  surface: ``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag, and ``clone3`` (its flags sit in
  memory where seccomp cannot look; it fails with ``ENOSYS`` so the C library falls back to ``clone``).
- kernel features unneeded by a program and known as attack surface: the kernel keyring, BPF, perf events,
  ``userfaultfd``, ``io_uring``, NUMA memory policy, ``personality``, the kernel log, and so on.
"""

from __future__ import annotations

import json
from typing import Any

# clone's flags are its first argument everywhere but s390, where they are the second.
_NEW_NAMESPACES = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
                   "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                   "CLONE_NEWNET": 0x40000000}
_S390 = ["s390", "s390x"]

DENIED = (
    # another process's memory or descriptors
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # kernel modules, reboot, time, swap, accounting, quotas
    "init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
    "kexec_load", "kexec_file_load", "reboot", "settimeofday", "stime", "clock_settime", "clock_adjtime",
    "adjtimex", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "sethostname", "setdomainname",
    # keyring, BPF, tracing, the kernel log
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "fanotify_init", "lookup_dcookie", "syslog",
    # memory tricks and little-used interfaces with a record of kernel bugs
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "mbind", "set_mempolicy",
    "get_mempolicy", "move_pages", "migrate_pages", "personality", "uselib", "ustat", "sysfs", "_sysctl",
    "nfsservctl", "vm86", "vm86old", "iopl", "ioperm", "vhangup", "name_to_handle_at", "open_by_handle_at",
)
EPERM, ENOSYS = 1, 38


def profile() -> dict[str, Any]:
    """The profile as Docker reads it: allow by default, deny what is listed."""
    rules: list[dict[str, Any]] = [
        {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
    ]
    for flag in _NEW_NAMESPACES.values():
        for index, arches in ((0, {"excludes": {"arches": _S390}}), (1, {"includes": {"arches": _S390}})):
            rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
                          "args": [{"index": index, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
                          **arches})
    return {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules}


def security_option() -> str:
    """``seccomp=<profile JSON>``, the form the engine takes in ``security_opt``."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))
