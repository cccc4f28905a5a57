"""Prints TCP_NODELAY (0 or 1) of the socket that process PID has connected to local PORT.

Usage: python3 sockopt.py PID PORT
Takes a duplicate of the other process's socket with pidfd_getfd(2) (Linux >= 5.6; needs
ptrace rights over PID, e.g. root) and reads the option with getsockopt.
"""
import ctypes
import os
import socket
import sys

SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438

libc = ctypes.CDLL(None, use_errno=True)
pid, port = int(sys.argv[1]), int(sys.argv[2])
pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
if pidfd < 0:
    sys.exit(f"pidfd_open failed: errno {ctypes.get_errno()}")
for name in os.listdir(f"/proc/{pid}/fd"):
    try:
        if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
            continue
    except OSError:
        continue
    fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
    if fd < 0:
        continue
    s = socket.socket(fileno=fd)
    try:
        inet = s.family in (socket.AF_INET, socket.AF_INET6)
        if inet and s.type == socket.SOCK_STREAM and s.getpeername()[1] == port:
            print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) and 1)
            sys.exit(0)
    except OSError:
        pass
    finally:
        s.detach()
        os.close(fd)
sys.exit("no socket connected to that port")
