"""What tests/security's attackers use: the agent link spoken by hand (SP over TCP or TLS, NNG's
REQ framing), AgentReport/NodeState written field by field from proto/nodesmith.proto, and the
coordinator's memory read from /proc. Everything talks to 127.0.0.x only."""
import os
import socket
import ssl
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import metric  # noqa: E402

MiB = 1 << 20
DEPLOYMENT_LIMIT = 512 * MiB  # packaging/kubernetes/deployment.yaml resources.limits.memory

# ---- protobuf wire format (proto3), for the few messages an attacker writes -------------------


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3) + varint(value) if value else b""


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data if data else b""


def resources(cpu_millis=2000, memory=4 << 30, pods=29):
    return field_varint(1, cpu_millis) + field_varint(2, memory) + field_varint(3, pods)


def identity(instance_id, boot_id, node_name, instance_type="m6i.large", zone="us-east-1a",
             document=b"", rsa2048=b""):
    return (field_bytes(1, instance_id) + field_bytes(2, instance_type) + field_bytes(3, zone) +
            field_bytes(4, "us-east-1") + field_varint(5, 1) + field_bytes(6, "amd64") +
            field_bytes(9, boot_id) + field_bytes(10, node_name) + field_bytes(13, document) +
            field_bytes(14, rsa2048))


def notice(kind=1, event_id="terminate@forged", action="terminate", deadline_unix_ms=None):
    deadline_unix_ms = deadline_unix_ms or int((time.time() + 120) * 1000)
    return (field_varint(1, kind) + field_bytes(2, event_id) + field_bytes(3, action) +
            field_varint(4, deadline_unix_ms) + field_varint(5, int(time.time() * 1000)))


def pod(namespace, name, uid, scheduling=""):
    return (field_bytes(1, namespace) + field_bytes(2, name) + field_bytes(3, uid) +
            field_bytes(12, "Running") + field_bytes(16, scheduling))


def node_state(ident, notices=(), pods=()):
    out = field_bytes(1, ident) + field_bytes(2, resources()) + field_bytes(3, resources())
    for p in pods:
        out += field_bytes(5, p)
    for n in notices:
        out += field_bytes(6, n)
    return out + field_varint(8, 1)


def agent_report(token, instance_id, boot_id, sequence, state=b"", boot_secret=b"", version=1, extra=b""):
    return (field_varint(1, version) + field_bytes(2, token) + field_bytes(3, instance_id) +
            field_bytes(4, boot_id) + field_varint(5, sequence) + field_varint(6, int(time.time() * 1000)) +
            field_varint(7, 1000) + field_bytes(8, state) + field_bytes(9, boot_secret) + extra)


def unknown_fields(size):
    """size bytes of a field this protocol does not know (number 1000, length-delimited)."""
    head = varint((1000 << 3) | 2)
    body = size - len(head) - len(varint(size))
    return head + varint(body) + b"\0" * body


def parse_fields(buf):
    """{field number: [values]} of one message's top level (varints as ints, the rest as bytes)."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            n, i = _read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


STATUS = {0: "OK", 1: "UNAUTHENTICATED", 2: "VERSION_MISMATCH", 3: "INVALID", 4: "OVERLOADED", 5: "PENDING"}


def directive(buf):
    f = parse_fields(buf)
    return {"status": STATUS.get(f.get(2, [0])[-1], "?"), "error": f.get(3, [b""])[-1].decode(errors="replace"),
            "action": "DRAIN" if f.get(4, [0])[-1] == 1 else "RUN", "boot_secret": f.get(12, [b""])[-1],
            "attested": bool(f.get(11, [0])[-1])}


# ---- the SP protocol (NNG REQ) over TCP or TLS ------------------------------------------------

SP_REQ = 0x30


class Link:
    """One connection to the coordinator's agent link, as an NNG REQ socket speaks it."""

    def __init__(self, url, ca=None, source="127.0.0.1", timeout=10.0, handshake=True):
        scheme, rest = url.split("://", 1)
        host, port = rest.rsplit(":", 1)
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.settimeout(timeout)
        raw.bind((source, 0))
        raw.connect((host, int(port)))
        self.sock = raw
        if scheme.startswith("tls+") and handshake:
            ctx = ssl.create_default_context(cafile=ca)
            ctx.check_hostname = False
            if not ca:
                ctx.verify_mode = ssl.CERT_NONE
            self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.req_id = 0x80000001
        if handshake:
            self.sock.sendall(bytes([0, ord("S"), ord("P"), 0]) + struct.pack(">H", SP_REQ) + b"\0\0")
            peer = self._recv_exact(8)
            if peer[:4] != b"\0SP\0":
                raise ConnectionError("no SP header")

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def send_partial(self, announced, send):
        """Announce a message of `announced` bytes and send only `send` of them."""
        body = struct.pack(">I", self.req_id) + b"\0" * max(0, send - 4)
        self.sock.sendall(struct.pack(">Q", announced) + body[:send])

    def request(self, body):
        self.sock.sendall(struct.pack(">Q", len(body) + 4) + struct.pack(">I", self.req_id) + body)
        n = struct.unpack(">Q", self._recv_exact(8))[0]
        reply = self._recv_exact(n)
        self.req_id += 1
        return directive(reply[4:])

    def closed(self, wait=0.0):
        """The coordinator closed the connection (within wait seconds)."""
        self.sock.settimeout(max(wait, 0.01))
        try:
            return self.sock.recv(1) == b""
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError):
            return True  # closed without (or with) a TLS close_notify
        except (socket.timeout, ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def report(url, ca, body, source="127.0.0.1"):
    link = Link(url, ca, source=source)
    try:
        return link.request(body)
    finally:
        link.close()


# ---- what the victim and the coordinator keep -------------------------------------------------

def rss(pid):
    """Resident memory of pid in bytes, and its peak (VmHWM)."""
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) * 1024
    return vals["VmRSS"], vals["VmHWM"]


class MemoryWatch:
    """Samples a process's RSS while a flood runs; .peak is the highest seen."""

    def __init__(self, pid):
        self.pid = pid
        self.base = rss(pid)[0]
        self.peak = self.base

    def sample(self):
        self.peak = max(self.peak, rss(self.pid)[0])
        return self.peak

    def report(self, what):
        now = rss(self.pid)[0]
        self.sample()
        line = (f"{what}: coordinator RSS {self.base / MiB:.0f} MiB before, peak {self.peak / MiB:.0f} MiB, "
                f"{now / MiB:.0f} MiB after (limit {DEPLOYMENT_LIMIT / MiB:.0f} MiB)")
        print(line)
        assert self.peak < DEPLOYMENT_LIMIT, line
        return now


def m(text, name, labels=None):
    return metric(text, name, labels) or 0
