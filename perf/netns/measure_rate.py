#!/usr/bin/env python3
"""measure_rate.py - checks that perf/netns/run.sh's tbf shaping gives the configured rate.

Run under the harness with 2 hosts x 1 rank:
  run.sh --hosts 2 --ranks-per-host 1 --rate 2gbit -- python3 measure_rate.py [MBYTES] [STREAMS]
Rank 0 (10.213.0.1) receives, rank 1 sends MBYTES (default 512) over STREAMS TCP connections
(default 1); rank 0 prints the goodput in Gbit/s from the first to the last byte. TCP/IP
headers are ~3% of the wire rate at 1500-byte MTU, so goodput ~0.97 x rate means "met".
"""
import os
import socket
import sys
import threading
import time

rank = int(os.environ["WEFT_RANK"])
host, port = os.environ["WEFT_ROOT"].split(":")
port = int(port) + 7
mbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 512
streams = int(sys.argv[2]) if len(sys.argv) > 2 else 1
total = mbytes << 20
per_stream = total // streams
chunk = b"\0" * (1 << 20)

if rank == 0:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(streams)
    got = [0] * streams
    first = [None]
    lock = threading.Lock()

    def serve(i, conn):
        buf = bytearray(1 << 20)
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            with lock:
                if first[0] is None:
                    first[0] = time.perf_counter()
            got[i] += n

    threads = []
    for i in range(streams):
        conn, _ = srv.accept()
        t = threading.Thread(target=serve, args=(i, conn))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    sec = time.perf_counter() - first[0]
    print(f"received {sum(got) >> 20} MiB over {streams} stream(s) in {sec:.3f} s: "
          f"{sum(got) * 8 / sec / 1e9:.3f} Gbit/s goodput")
elif rank == 1:
    deadline = time.time() + 20
    def send():
        while True:
            try:
                s = socket.create_connection((host, port))
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        left = per_stream
        while left > 0:
            n = min(left, len(chunk))
            s.sendall(chunk[:n])
            left -= n
        s.close()
    threads = [threading.Thread(target=send) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
