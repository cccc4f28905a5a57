"""Runs a command on a pseudo-terminal, as a person at a terminal would run it, for a
host that only offers its interactive mode there (Claude Code's tasks).

    python3 terminal.py COMMAND [ARG]...

The terminal is 200 columns by 50 rows. What the command writes to it is copied to
stdout as it comes; what arrives on stdin is typed into it. When stdin ends, the command
gets SIGTERM (SIGKILL 10 s later if still running); the exit status is the command's.
"""

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: terminal.py COMMAND [ARG]...")
    pid, terminal = pty.fork()
    if pid == 0:
        os.execvp(sys.argv[1], sys.argv[1:])
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    stdin = sys.stdin.fileno()
    stdout = sys.stdout.buffer
    watched = [terminal, stdin]
    stopping_since = None
    while True:
        # While stopping, wake up now and then to escalate to SIGKILL.
        ready, _, _ = select.select(watched, [], [], 1.0 if stopping_since else None)
        if terminal in ready:
            try:
                data = os.read(terminal, 65536)
            except OSError:  # EIO: the command closed the terminal (it exited)
                data = b""
            if not data:
                break
            stdout.write(data)
            stdout.flush()
        if stdin in ready:
            data = os.read(stdin, 65536)
            if data:
                os.write(terminal, data)
            else:
                watched.remove(stdin)
                os.kill(pid, signal.SIGTERM)
                stopping_since = os.times().elapsed
        if stopping_since and os.times().elapsed - stopping_since > 10:
            os.kill(pid, signal.SIGKILL)
            stopping_since = None
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    # Killed by signal N: 128 + N, as a shell reports it.
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
