#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/fuzz_wire.c into
tests/fuzz/corpus/wire/: the messages a real peer sends (wire.h) in the
target's record format (the target seals each header: hlen and CRC)."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "wire")
NOBUF = 0xFFFFFFFFFFFFFFFF
HLEN = {1: 128, 2: 56, 3: 64, 4: 32, 5: 24, 6: 48, 7: 32, 8: 24, 9: 20, 10: 20, 11: 128}


def rec(typ, flags, fields, payload=b"", conn=0, poll=True, plen_from_payload=True, fix_addr=False):
    """One sealed header: prefix (plen from the payload), fields, CRC placeholder."""
    hl = HLEN[typ]
    body = struct.pack("<BHI", flags, hl, len(payload)) + fields
    body = body.ljust(hl - 1 - 4, b"\0") + b"\0\0\0\0"
    assert len(body) == hl - 1, (typ, len(body))
    fl = conn | (0x10 if poll else 0) | (0x40 if plen_from_payload else 0) | (0x80 if fix_addr else 0)
    return bytes([fl, typ]) + body + struct.pack("<H", len(payload)) + payload


def data(flags, seq, size, msg, tag, idx, grid, nth, claim, payload=b""):
    return rec(2, flags, struct.pack("<QQIiIIIII", seq, size, msg, tag, idx, grid, nth, claim, 0), payload)


def chunk(conn, flags, seq, total, offset, idx, index, grid, tag=0, nth=0, claim=0, attempt=0):
    n = min(grid, total - offset)
    return rec(3, flags, struct.pack("<QQQIIIIiII", seq, total, offset, idx, index, grid, attempt, tag, nth, claim),
               bytes((offset + i) & 255 for i in range(n)), conn=conn)


def cts(seq, msg, sizes_tags):
    sizes = [s for s, _ in sizes_tags] + [NOBUF] * (8 - len(sizes_tags))
    tags = [t for _, t in sizes_tags] + [0] * (8 - len(sizes_tags))
    return rec(1, 0, struct.pack("<Q8QII8iI", seq, *sizes, msg, len(sizes_tags), *tags, 0))


def wire_addr_v4_port0():
    return struct.pack("<BBH16s", 4, 0, 0, bytes([127, 0, 0, 1]) + b"\0" * 12)


def recv_mode(cfg, groups, records, pre=None, mode=1):
    """pre: groups posted before the records (all by default); a record
    bytes([0x28]) posts the next."""
    pre = len(groups) if pre is None else pre
    out = bytes([mode, cfg, (len(groups) - 1) | pre << 2])
    for g in groups:
        out += bytes([len(g) - 1])
        for size, tag in g:
            out += struct.pack("<Hb", size, tag)
    return out + b"".join(records)


def send_mode(cfg, sends, records, mode=2):
    out = bytes([mode, cfg, len(sends) - 1])
    for size, tag in sends:
        out += struct.pack("<Hb", size, tag)
    return out + b"".join(records)


# Actions (fw_record: op 2 with bit 7, then the action byte and its
# arguments; fw_recv_action / fw_send_action in fuzz_wire.c).
ACT = 0x88


def tmpl(kind, a, *more, mutate=b"\0"):
    """A message the harness makes from its state (kind: mode 1 0 DOWN,
    1 WANT, 2 BYE, 3 OPEN, 4 EAGER DATA; mode 2 0 CTS, 1 ACK, 2 OFFER,
    3 STREAMS, 4 BYE, 5 RESUME), sealed unmutated."""
    return bytes([ACT, kind << 3, a]) + bytes(more) + mutate


def eager(tag, size, credit=0):
    return bytes([ACT, 4 << 3, credit]) + struct.pack("<Hb", size, tag) + b"\0"


def chunk_tmpl(group, idx, index, stream, attempt=0):
    """A chunk of buffer idx of a group, made by the harness (mode 1)."""
    return bytes([ACT, 5 << 3, attempt << 3 | group, idx, index, 0, stream])


def streamed_tmpl(group, idx, ack=True):
    return bytes([ACT, 7 << 3, group | (0 if ack else 0x80), idx, 0])


def act(what, *args):
    return bytes([ACT, what]) + bytes(args)


CLOSE, QUIET, PAUSE, MOVE, REJOIN, REPEAT = 1, 2, 3, 4, 5, 6


def repeat(n, action):
    """An action record (ACT, then the action byte) repeated n times."""
    return bytes([ACT, REPEAT, n - 1]) + action[1:]


def hello(role, index, conn, nstreams, extra=b""):
    return bytes([1, role - 1, index, conn, nstreams, 0, len(extra)]) + extra


seeds = {
    # a hostile sender: the receive comm's view
    "recv-inline": recv_mode(0, [[(16, 1)]], [data(0, 0, 16, 0, 1, 0, 0, 0, 0, bytes(range(16)))]),
    "recv-eager": recv_mode(0, [[(64, 3)]], [data(1, 0, 40, 0, 3, 0, 0, 0, 0, bytes(40))]),
    "recv-eager-held": recv_mode(0, [[(8, 1)], [(8, 1)]],
                                 [data(1, 0, 8, 0, 1, 0, 0, 1, 0, b"b" * 8),
                                  data(1, 0, 8, 1, 1, 0, 0, 0, 1, b"a" * 8)]),
    "recv-eager-before-post": recv_mode(0, [[(8, 1)], [(8, 1), (16, 2)]],
                                        [data(1, 0, 8, 0, 1, 0, 0, 1, 0, b"b" * 8),
                                         data(1, 0, 16, 1, 2, 0, 0, 0, 1, b"c" * 16),
                                         bytes([0x28]),
                                         data(1, 0, 8, 2, 1, 0, 0, 0, 2, b"a" * 8),
                                         bytes([0x28])], pre=0),
    "recv-group-close": recv_mode(4, [[(16, 1), (0, 2), (32, 3)]],
                                  [data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"x" * 16),
                                   data(0, 0, 0, 1, 2, 1, 0, 0, 1),
                                   data(4, 0, 99, 2, 3, 2, 0, 0, 2)]),
    "recv-streamed": recv_mode(1, [[(2048, 5)]],
                               [data(2 | 8, 0, 2048, 0, 5, 0, 1024, 0, 0),
                                chunk(1, 0, 0, 2048, 0, 0, 0, 1024),
                                chunk(1, 0, 0, 2048, 1024, 0, 1, 1024)]),
    "recv-claim": recv_mode(2, [[(1500, 7)]],
                            [chunk(1, 1 | 2, 0, 1500, 1024, 0, 1, 1024, 7, 0, 0),
                             chunk(2, 1 | 2, 0, 1500, 0, 0, 0, 1024, 7, 0, 0)]),
    "recv-down": recv_mode(6, [[(16, 1)]],
                           [rec(5, 0, struct.pack("<III", 0, 1, 0)),
                            data(0, 0, 16, 1, 1, 0, 0, 0, 0, b"y" * 16)]),
    "recv-open-want-bye": recv_mode(0, [[(300, 1)], [(300, 1)]],
                                    [rec(9, 0, struct.pack("<II", 0, 0)),
                                     rec(10, 0, struct.pack("<II", 1, 0)),
                                     data(2, 0, 300, 2, 1, 0, 4096, 0, 0),
                                     rec(8, 0, struct.pack("<III", 3, 0, 0))]),
    "recv-lazy-open": recv_mode(0x40, [[(2048, 9)]],
                                [rec(10, 0, struct.pack("<II", 0, 0)), bytes([0x08]), bytes([0x08]),
                                 data(2 | 8, 0, 2048, 1, 9, 0, 1024, 0, 0),
                                 chunk(1, 0, 0, 2048, 0, 0, 0, 1024),
                                 chunk(1, 0, 0, 2048, 1024, 0, 1, 1024)]),
    "recv-lazy-claim-idle": recv_mode(0x80, [[(1500, 2)]],
                                      [rec(10, 0, struct.pack("<II", 0, 0)), bytes([0x08]), bytes([0x08]),
                                       chunk(1, 1 | 2, 0, 1500, 0, 0, 0, 1024, 2, 0, 0),
                                       chunk(2, 1 | 2, 0, 1500, 1024, 0, 1, 1024, 2, 0, 0),
                                       rec(5, 1, struct.pack("<III", 1, 3, 0))]),
    # a hostile receiver: the send comm's view
    "send-cts": send_mode(0, [(16, 1)], [cts(0, 0, [(16, 1)])]),
    "send-cts-group": send_mode(1, [(16, 1), (200, 2), (16, 1)],
                                [cts(0, 0, [(16, 1), (200, 2)]), cts(1, 1, [(8, 1)])]),
    "send-streams-ack": send_mode(0, [(8192, 4)],
                                  [cts(0, 0, [(8192, 4)]),
                                   rec(11, 0, struct.pack("<QII", 99, 1, 1) + wire_addr_v4_port0(), fix_addr=True),
                                   rec(4, 0, struct.pack("<QIII", 0, 2, 0, 0))]),
    "send-open-streams": send_mode(0x0E, [(0xA000, 6)],
                                   [cts(0, 0, [(0xA000 << 7, 6)]), bytes([0x08]),
                                    rec(11, 0, struct.pack("<QII", 5, 1, 1) + wire_addr_v4_port0(), fix_addr=True),
                                    bytes([0x08]) * 24,
                                    rec(4, 0, struct.pack("<QIII", 0, 2, 0, 0))]),
    "send-offer": send_mode(0, [(16, 1)],
                            [cts(0, 0, [(16, 1)]),
                             rec(6, 0, struct.pack("<QII", 7, 1, 1) + wire_addr_v4_port0(), fix_addr=True)]),
    # the same on a device of two rails (first byte + 3: fuzz_wire.sh runs
    # the target in a network namespace with a second interface)
    "mr-recv-inline": recv_mode(0, [[(16, 1)]], [data(0, 0, 16, 0, 1, 0, 0, 0, 0, bytes(range(16)))], mode=4),
    "mr-recv-claim": recv_mode(0, [[(6000, 7)]],
                               [chunk(1, 1 | 2, 0, 6000, 4096, 0, 1, 4096, 7, 0, 0),
                                chunk(2, 1 | 2, 0, 6000, 0, 0, 0, 4096, 7, 0, 0)], mode=4),
    "mr-recv-down-rejoin": recv_mode(0, [[(6000, 7)]],
                                     [chunk(1, 1 | 2, 0, 6000, 0, 0, 0, 4096, 7, 0, 0),
                                      tmpl(0, 1), act(PAUSE, 4), act(REJOIN, 0), act(PAUSE, 12),
                                      chunk(2, 1 | 2, 0, 6000, 4096, 0, 1, 4096, 7, 0, 0)], mode=4),
    "mr-recv-down-resend": recv_mode(0, [[(9000, 7)]],
                                     [chunk(2, 1 | 2, 0, 9000, 0, 0, 0, 4096, 7, 0, 0),
                                      tmpl(0, 1), act(PAUSE, 2),
                                      chunk(1, 1 | 2, 0, 9000, 4096, 0, 1, 4096, 7, 0, 0, attempt=1),
                                      chunk(1, 1 | 2, 0, 9000, 8192, 0, 2, 4096, 7, 0, 0, attempt=1),
                                      chunk(1, 1 | 2, 0, 9000, 0, 0, 0, 4096, 7, 0, 0, attempt=1)], mode=4),
    "mr-recv-move": recv_mode(0, [[(16, 1)], [(16, 2)]],
                              [data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"a" * 16), act(PAUSE, 2),
                               act(MOVE, 1), act(PAUSE, 12),
                               data(0, 1, 16, 1, 2, 0, 0, 0, 1, b"b" * 16)], mode=4),
    "mr-recv-move-close-old": recv_mode(0, [[(16, 1)]],
                                        [act(MOVE, 0x80), act(PAUSE, 12),
                                         data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"c" * 16)], mode=4),
    "mr-recv-close-ctrl": recv_mode(4, [[(16, 1)]], [act(CLOSE, 0), act(PAUSE, 20)], mode=4),
    "mr-recv-left-out": recv_mode(0x40, [[(6000, 3)]],
                                  [act(PAUSE, 4), act(REJOIN, 0), act(PAUSE, 12),
                                   chunk(1, 1 | 2, 0, 6000, 0, 0, 0, 4096, 3, 0, 0),
                                   chunk(2, 1 | 2, 0, 6000, 4096, 0, 1, 4096, 3, 0, 0)], mode=4),
    "mr-recv-eager-held": recv_mode(0, [[(8, 1)]], [repeat(70, eager(9, 8))], mode=4),
    "mr-recv-eager-bytes": recv_mode(0, [[(8, 1)]], [repeat(9, eager(9, 0xFFFF, 1))], mode=4),
    "mr-recv-want-bye": recv_mode(0, [[(16, 1)]], [tmpl(1, 0), tmpl(2, 0)], mode=4),
    "mr-recv-idle-open": recv_mode(0, [[(16, 1)]], [tmpl(0, 6), act(PAUSE, 4), tmpl(3, 0)], mode=4),
    "mr-recv-tmpl-resend": recv_mode(0, [[(9000, 4)]],
                                     [streamed_tmpl(0, 0), chunk_tmpl(0, 0, 0, 0), chunk_tmpl(0, 0, 1, 1),
                                      tmpl(0, 1), act(PAUSE, 2), chunk_tmpl(0, 0, 1, 0, attempt=1),
                                      chunk_tmpl(0, 0, 2, 0)], mode=4),
    "mr-recv-move-twice": recv_mode(0, [[(16, 1)], [(16, 2)], [(16, 3)]],
                                    [act(MOVE, 1), act(PAUSE, 12), data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"a" * 16),
                                     act(PAUSE, 2), act(MOVE, 0x80), act(PAUSE, 12),
                                     data(0, 1, 16, 1, 2, 0, 0, 0, 1, b"b" * 16), act(PAUSE, 2),
                                     data(0, 2, 16, 2, 3, 0, 0, 0, 2, b"c" * 16)], mode=4),
    "mr-recv-move-withheld": recv_mode(0, [[(16, 1)]],
                                       [act(7, 0x80), act(MOVE, 1), act(PAUSE, 12), tmpl(6, 0),
                                        act(PAUSE, 12), data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"d" * 16)], mode=4),
    "mr-recv-move-replay": recv_mode(0, [[(16, 1)], [(16, 2)]],
                                     [act(PAUSE, 2), data(0, 0, 16, 0, 1, 0, 0, 0, 0, b"e" * 16),
                                      act(7, 9 << 2), act(MOVE, 0), act(PAUSE, 12),
                                      data(0, 1, 16, 1, 2, 0, 0, 0, 1, b"f" * 16)], mode=4),
    "mr-send-move-replay": send_mode(0, [(16, 1), (300, 2)],
                                     [tmpl(2, 3), tmpl(2, 2), act(7, 16 << 2), act(PAUSE, 2),
                                      act(CLOSE, 0x81), act(CLOSE, 0x83), tmpl(0, 1), act(PAUSE, 30),
                                      tmpl(1, 0), act(PAUSE, 4)], mode=5),
    "mr-send-cts": send_mode(0, [(16, 1), (9000, 2)], [tmpl(0, 1), act(PAUSE, 4), tmpl(1, 1)], mode=5),
    "mr-send-cts-window": send_mode(0, [(9000, 1)], [repeat(70, tmpl(0, 0))], mode=5),
    "mr-send-move": send_mode(0, [(16, 1), (9000, 2)],
                              [tmpl(2, 3), tmpl(2, 2), act(PAUSE, 2), act(CLOSE, 0x80), act(PAUSE, 30),
                               tmpl(0, 1), act(PAUSE, 4), tmpl(1, 1)], mode=5),
    "mr-send-rail-close": send_mode(0, [(60000, 2)],
                                    [tmpl(2, 3), tmpl(2, 2), tmpl(0, 0), act(PAUSE, 2), act(CLOSE, 2),
                                     act(PAUSE, 30), tmpl(2, 8), act(PAUSE, 60), tmpl(1, 0)], mode=5),
    "mr-send-streams": send_mode(0, [(16, 1)], [tmpl(3, 0), tmpl(4, 0)], mode=5),
    "mr-send-resume-bad": send_mode(0, [(16, 1)],
                                    [tmpl(2, 3), act(7, 1, 0x18, 1), act(CLOSE, 0x80), act(PAUSE, 30)], mode=5),
    "mr-hello-flood": bytes([3, 0x80 | 2]) + hello(1, 0, 0, 2) + hello(2, 0, 0, 2) + hello(2, 1, 0, 2) + bytes([4]),
    # a hostile connector: the listener's view
    "hello-ctrl": bytes([0, 0]) + hello(1, 0, 0, 0) + bytes([4]),
    "hello-streams": bytes([0, 2]) + hello(1, 0, 0, 2) + hello(2, 0, 0, 2) + hello(2, 1, 0, 2) + bytes([4]),
    "hello-garbage": bytes([0, 1, 0, 16]) + b"\x6f\x68\x6e\x72\x0c\x00\x01\x00garbage!" + bytes([2, 5]) + b"hello" + bytes([8]),
}
os.makedirs(OUT, exist_ok=True)
for name, blob in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)
