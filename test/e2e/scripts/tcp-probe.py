#!/usr/bin/env python3
# A TCP service and its client for firewall tests (admin endpoints):
#   tcp-probe.py serve PORT              answers "ok" to every connection, forever
#   tcp-probe.py connect SOURCE DEST PORT  prints "open" (answered), "closed" or "refused"
import socket
import sys

if sys.argv[1] == 'serve':
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', int(sys.argv[2])))
    s.listen(16)
    while True:
        c, _ = s.accept()
        c.sendall(b'ok')
        c.close()
else:
    source, dest, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = socket.socket()
    s.settimeout(3)
    s.bind((source, 0))
    try:
        s.connect((dest, port))
        print('open' if s.recv(2) == b'ok' else 'closed')
    except OSError:
        print('refused')
