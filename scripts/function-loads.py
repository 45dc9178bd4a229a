#!/usr/bin/env python3
"""Loads N function libraries of new names one by one (one client, each
load waiting for its reply) on the server at 127.0.0.1:PORT and prints the
loads per second: scripts/bench.sh's `function-load` test.

    scripts/function-loads.py PORT N
"""
import socket
import sys
import time


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    started = time.time()
    for i in range(n):
        code = "#!lua name=l%d\nredis.register_function('f%d', function() return 1 end)" % (i, i)
        s.sendall(command("FUNCTION", "LOAD", code))
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += s.recv(65536)
        if not reply.startswith(b"$"):
            sys.exit("function-loads: %r" % reply)
    print("%.2f" % (n / (time.time() - started)))


if __name__ == "__main__":
    main()
