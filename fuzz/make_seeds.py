#!/usr/bin/env python3
"""fuzz/make_seeds.py: writes the seed corpora in fuzz/corpus/<target>/ (committed).

Seeds are small valid (and nearly valid) examples of each format, so the fuzzer starts
past the magic numbers and keywords instead of having to guess them. Re-run after a format
changes: python3 fuzz/make_seeds.py (topology seeds come from fuzz/seeds/*.topo, saved with
`weft-topo --preset NAME --save FILE`).
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

HELLO_MAGIC = 0x57454654      # net/socket.h kHelloMagic
UID_MAGIC = 0x57465455        # core/bootstrap.cc kUniqueIdMagic
TCP_MAGIC = 0x57544350        # transports/tcp/tcp_wire.h kDataMagic
WIRE_INET, WIRE_INET6 = 4, 6  # placeholders replaced below from the real encoder's layout


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def sockaddr_v4(ip, port, family_code):
    return struct.pack(">HH", family_code, port) + bytes(ip) + bytes(12) + bytes(8)


def sockaddr_v6(ip16, port, family_code, scope=0):
    return struct.pack(">HH", family_code, port) + bytes(ip16) + struct.pack(">II", scope, 0)


def hello(kind, rank, nranks, index, secret=bytes(range(16))):
    return struct.pack(">IHH", HELLO_MAGIC, 1, kind) + secret + struct.pack(">iii", rank, nranks, index)


def main():
    # The wire family codes are whatever net::EncodeSockAddr writes; try the common choices
    # (the fuzzer mutates from there anyway).
    fams = [2, 10, 4, 6, 1]
    for i, fam in enumerate(fams):
        write("handshake", "v4_%d" % i, hello(1, 0, 2, 0) + sockaddr_v4([127, 0, 0, 1], 29500, fam))
        write("handshake", "v6_%d" % i, hello(3, 1, 4, 2) + sockaddr_v6([0] * 15 + [1], 1, fam, 3))
        uid = struct.pack(">IHH", UID_MAGIC, 1, 0) + sockaddr_v4([10, 0, 0, 7], 29500, fam) + bytes(range(16))
        write("unique_id", "v4_%d" % i, uid + bytes(128 - len(uid)))
        uid6 = struct.pack(">IHH", UID_MAGIC, 1, 0) + sockaddr_v6([0xfe, 0x80] + [0] * 13 + [1], 80, fam, 2) + bytes(16)
        write("unique_id", "v6_%d" % i, uid6 + bytes(128 - len(uid6)))
    write("unique_id", "zeros", bytes(128))

    # bootstrap: mode 0 = to the root (bit 1: real secret), mode 1 = fake root's verdict.
    for i, fam in enumerate(fams[:2]):
        write("bootstrap", "root_ok_%d" % i, bytes([2]) + hello(1, 0, 1, 0) + sockaddr_v4([127, 0, 0, 1], 1, fam))
        write("bootstrap", "root_two_%d" % i, bytes([2]) + hello(1, 1, 2, 0) + sockaddr_v4([127, 0, 0, 1], 1, fam))
    write("bootstrap", "root_bad_secret", bytes([0]) + hello(1, 0, 1, 0) + sockaddr_v4([127, 0, 0, 1], 1, 2))
    write("bootstrap", "verdict_ok", bytes([1]) + struct.pack(">II", 0, 0) + sockaddr_v4([127, 0, 0, 1], 1, 2))
    msg = b"bootstrap root: rank 1 joined twice"
    write("bootstrap", "verdict_err", bytes([1]) + struct.pack(">II", 4, len(msg)) + msg)
    write("bootstrap", "verdict_code", bytes([1]) + struct.pack(">II", 1000, 3) + b"abc")

    # tcp frames: mode byte, recv plans {channel u8, tag u8, bytes u32}, then frames.
    def frame(channel, tag, payload):
        return struct.pack("<IIQQ", TCP_MAGIC, channel, tag, len(payload)) + payload
    plan = bytes([1, 7]) + struct.pack("<I", 16)
    write("tcp_frame", "match_before", bytes([0x05]) + plan + frame(1, 7, b"A" * 16))
    write("tcp_frame", "match_after", bytes([0x01]) + plan + frame(1, 7, b"A" * 16))
    write("tcp_frame", "mismatch", bytes([0x05]) + plan + frame(1, 8, b"B" * 5) + frame(1, 7, b"A" * 16))
    write("tcp_frame", "two_channels", bytes([0x06]) + plan + bytes([2, 3]) + struct.pack("<I", 4) +
          frame(2, 3, b"CCCC") + frame(1, 7, b"A" * 16))
    write("tcp_frame", "truncated", bytes([0x05]) + plan + frame(1, 7, b"A" * 16)[:30])
    write("tcp_frame", "bad_index", bytes([0x0d]) + plan + frame(1, 7, b"A" * 16))

    # shm: {op, channel, tag, size u16} x n; op bit 1 = send, bit 0 = direction, bit 2 = x8.
    def shm_op(send, direction, channel, tag, size, big=False):
        return bytes([(2 if send else 0) | direction | (4 if big else 0), channel, tag]) + struct.pack("<H", size)
    write("shm_frame", "pingpong", shm_op(1, 0, 0, 1, 64) + shm_op(0, 0, 0, 1, 64) +
          shm_op(1, 1, 0, 2, 64) + shm_op(0, 1, 0, 2, 64))
    write("shm_frame", "mismatch", shm_op(1, 0, 1, 1, 100) + shm_op(0, 0, 1, 2, 100))
    write("shm_frame", "stash", shm_op(1, 0, 2, 1, 10) + shm_op(1, 0, 3, 1, 10) + shm_op(0, 0, 3, 1, 10) +
          shm_op(0, 0, 2, 1, 10))
    write("shm_frame", "large", shm_op(1, 0, 0, 0, 3000, True) + shm_op(0, 0, 0, 0, 3000, True))

    algos = ["allreduce:ring", "allreduce:0-64K:recursive_doubling,64K-inf:ring;alltoall:pairwise",
             "broadcast:chain;reduce:binomial", "allgather:0-1K:bruck,1K-inf:ring",
             "reducescatter:0-inf:pairwise", "allreduce:ring;", "allreduce:1M-1K:ring", "bogus:ring"]
    for i, a in enumerate(algos):
        write("algo_override", "a%d" % i, a)
        write("settings_env", "algo%d" % i, bytes([14]) + a.encode())
    tuning = ["allreduce 0-64K recursive_doubling 0 1\nallreduce 64K-inf ring 512K 2\n",
              "# comment\nalltoall 0-inf pairwise 1M 4\n", "allgather 1K-2K ring 0 65\n",
              "broadcast 0-8 chain 0 1 # trailing\n"]
    for i, t in enumerate(tuning):
        write("tuning_file", "t%d" % i, t)
    links = ["link type=nvlink bw_gbps=400 latency_us=1.5\n",
             "compute kind=cpu reduce_gbps=10 copy_gbps=20\nlink type=network bw_gbps=12.5\n",
             "link type=bogus bw_gbps=1\n", "link type=pcie bw_gbps=-1\n"]
    for i, t in enumerate(links):
        write("link_table", "l%d" % i, t)
        write("records", "l%d" % i, t)
    records = ["host id=node7%7C3f2a name=node7 packages=2 numa=2 cores=64\n", "# c\n\nrank rank=0 host=0\n",
               "k a=%41%20b c=\n", "x y=1e308 z=-9223372036854775808\n"]
    for i, t in enumerate(records):
        write("records", "r%d" % i, t)
    for name in sorted(os.listdir(os.path.join(HERE, "seeds"))):
        with open(os.path.join(HERE, "seeds", name), "rb") as f:
            text = f.read()
        write("topology_file", name, text)
        write("records", name, text)
    presets = ["dgx-h100", "dgx-h100:2", "dgx-h100-fattree:8:2", "netns:2x2@2", "host:4", "host", "netns:3x1"]
    for i, p in enumerate(presets):
        write("preset", "p%d" % i, struct.pack("<I", 0) + p.encode())
        write("preset", "n%d" % i, struct.pack("<I", 4) + p.encode())
    env = [(1, "1M"), (2, "64K"), (3, "4M"), (4, "0"), (7, "100"), (8, "4"), (9, "4194304"), (11, "5"),
           (12, "1000"), (13, "2.5"), (15, "00112233445566778899aabbccddeeff"), (16, "127.0.0.1:29500"),
           (16, "[::1]:1"), (17, "^docker,lo"), (17, "=eth0"), (18, "AF_INET6"), (1, "16E"), (13, "-1")]
    for i, (var, value) in enumerate(env):
        write("settings_env", "e%d" % i, bytes([var]) + value.encode())

    # Pure decoders (tcp_wire.h, shm_wire.h, bootstrap_wire.h): a header, optionally a u64 cap.
    abort_magic = 0x57544341
    write("tcp_wire", "data", struct.pack("<IIQQ", TCP_MAGIC, 3, 7, 4096))
    write("tcp_wire", "data_capped", struct.pack("<IIQQQ", TCP_MAGIC, 3, 7, 4096, 1024))
    write("tcp_wire", "note", struct.pack("<IIQQ", abort_magic, 1, 0, 40))
    write("tcp_wire", "big_channel", struct.pack("<IIQQ", TCP_MAGIC, 70000, 7, 8))
    msg_magic = 0x6d736731
    def shm_header(channel, flags, tag, size, address):
        return struct.pack("<IHHQQQ", msg_magic, channel, flags, tag, size, address) + bytes(32)
    write("shm_wire", "ring", shm_header(2, 0, 9, 4096, 0))
    write("shm_wire", "single_copy", shm_header(0, 1, 9, 1 << 20, 0x7f0000001000))
    write("shm_wire", "capped", shm_header(0, 0, 9, 1 << 20, 0) + struct.pack("<Q", 4096))
    write("bootstrap_wire", "verdict_ok", bytes([0]) + struct.pack(">II", 0, 0))
    write("bootstrap_wire", "verdict_err", bytes([0]) + struct.pack(">II", 8, 120))
    write("bootstrap_wire", "call", bytes([1]) + struct.pack(">IIIi", 2, 5, 4096, 1))
    write("bootstrap_wire", "call_bad_op", bytes([1]) + struct.pack(">IIIi", 9, 5, 4096, -1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
