"""User-space one-way delay between two network namespaces (this kernel has no netem).

Run by `linkemu` as its own process (`python -m prfaas.transfer.delayline ...`) so it never
competes with the transfer code for a GIL. It opens one TUN device inside each namespace; every
IP packet one namespace sends into its TUN is held for `delay_s` and then written into the
other namespace's TUN, in both directions, so the kernels' TCP stacks see a real round trip of
2 x delay_s (and the scheduler's RTT telemetry reports it). Rate shaping stays in the kernel
(`tbf` on each TUN's egress). It exits when its stdin closes.

    ns A: tcp -> tbf -> tunA ──read──► [heap: due = now + delay] ──write──► tunB -> tcp :ns B

With `EmulatedLinkSpec.delay_return_path_only`, `linkemu` routes only the return path
(receiver to sender: ACKs, small frames) through it, with the whole round trip as the delay,
so the bulk data never crosses user space (`linkemu._return_path_delayed`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import heapq
import itertools
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
MAX_PACKET_BYTES = 65536
MAX_BATCH_PACKETS = 64


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace `name` (as `ip netns exec` does)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def open_tun(name: str) -> int:
    """Create TUN device `name` in the current namespace; it vanishes when the fd closes."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def forward(fd_a: int, fd_b: int, delay_s: float, control_fd: int) -> None:
    """Delay every packet by delay_s in both directions until `control_fd` reaches EOF."""
    peer = {fd_a: fd_b, fd_b: fd_a}
    pending: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()
    while True:
        now_s = time.monotonic()
        while pending and pending[0][0] <= now_s:
            _, _, out_fd, packet = heapq.heappop(pending)
            # A full TUN queue drops the packet, as a congested link would.
            with contextlib.suppress(OSError):
                os.write(out_fd, packet)
        wait_s = max(pending[0][0] - now_s, 0.0) if pending else 1.0
        readable, _, _ = select.select([fd_a, fd_b, control_fd], [], [], wait_s)
        if control_fd in readable and not os.read(control_fd, 1):
            return
        due_s = time.monotonic() + delay_s
        for fd in readable:
            if fd == control_fd:
                continue
            for _ in range(MAX_BATCH_PACKETS):
                try:
                    packet = os.read(fd, MAX_PACKET_BYTES)
                except BlockingIOError:
                    break
                heapq.heappush(pending, (due_s, next(order), peer[fd], packet))


def main(argv: list[str]) -> None:
    ns_a, tun_a, ns_b, tun_b, delay = argv
    enter_netns(ns_a)
    fd_a = open_tun(tun_a)
    enter_netns(ns_b)
    fd_b = open_tun(tun_b)
    print("ready", flush=True)
    forward(fd_a, fd_b, float(delay), sys.stdin.fileno())


if __name__ == "__main__":
    main(sys.argv[1:])
