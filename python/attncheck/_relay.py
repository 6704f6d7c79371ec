# The worker command attncheck.check() hands to `attncheck property --worker`: it relays the protocol between its
# stdin/stdout and a Unix socket on which the calling Python process serves the kernel in-process.
# Usage: python3 _relay.py SOCKET_PATH
import os
import select
import socket
import sys

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
ends = {0: sock.fileno(), sock.fileno(): 1}
while True:
    ready, _, _ = select.select([0, sock.fileno()], [], [])
    for fd in ready:
        data = os.read(fd, 1 << 16)
        if not data:
            sys.exit(0)
        target = ends[fd]
        while data:
            data = data[os.write(target, data):]
