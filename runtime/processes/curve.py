"""CURVE security for sockets that leave the machine: keys per topology, and a gatekeeper.

ZeroMQ's CURVE mechanism encrypts a TCP connection and proves the server's identity to
the client, but on its own it admits *any* client that knows the server's public key
(which is not a secret). Admission is the job of a ZAP authenticator: without one, every
CURVE client gets in. So every process that binds a TCP socket for a topology runs a
:class:`Gatekeeper`: a pyzmq authenticator thread whose only rule is "the client's public
key is the topology's client key", plus a socket monitor that logs and counts the
handshakes refused before the authenticator is even asked (a client speaking the NULL
mechanism, or one that does not know the server key).

A topology has two key pairs, made at submit (:meth:`TopologyKeys.generate`): the
*server* pair, used by every binding socket (the master's control socket, each stream
manager's inbound data socket), and the *client* pair, used by every connecting one. Both
secret keys travel only inside the boot message of a process we start (over its stdin
pipe, or inside a Spark task's closure: see docs/remote.md), never on a socket.

Local topologies do not use any of this: they bind to 127.0.0.1 and to unix sockets that
only this user can open, and seal control messages with the topology's HMAC secret.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import zmq

# zmq.auth.thread and zmq.utils.monitor are imported where a Gatekeeper uses them: both
# pull in asyncio, about a fifth of the start-up of a process that never serves CURVE
# (every instance, stream manager and master of a local topology).

log = logging.getLogger(__name__)

# The largest message a topology socket accepts; a bigger one closes that connection
# (ZMQ_MAXMSGSIZE), instead of making the process allocate whatever a peer announces.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ZAP_DOMAIN = "tupleflow"  # the authentication domain of every topology server socket

# Monitor events that mean "a peer tried and was turned away".
_REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed: protocol error (wrong mechanism?)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused by the authenticator",
}


@dataclass(frozen=True)
class TopologyKeys:
    """The two CURVE key pairs of one topology (Z85 text, 40 bytes each)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def generate(cls) -> TopologyKeys:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public, server_secret, client_public, client_secret)

    def to_data(self) -> dict:
        return {"server_public": self.server_public, "server_secret": self.server_secret,
                "client_public": self.client_public, "client_secret": self.client_secret}

    @classmethod
    def from_data(cls, data: dict) -> TopologyKeys:
        return cls(**{k: bytes(data[k]) for k in ("server_public", "server_secret",
                                                  "client_public", "client_secret")})


def limit(sock: zmq.Socket) -> zmq.Socket:
    """Refuse messages over :data:`MAX_MESSAGE_BYTES` on this socket (set before bind or
    connect)."""
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    return sock


def make_server(sock: zmq.Socket, keys: TopologyKeys) -> zmq.Socket:
    """Make ``sock`` a CURVE server with the topology's server key (before bind)."""
    limit(sock)
    sock.curve_server = True
    sock.curve_publickey = keys.server_public
    sock.curve_secretkey = keys.server_secret
    sock.zap_domain = ZAP_DOMAIN.encode()  # the authenticator's rule is set for this domain
    return sock


def make_client(sock: zmq.Socket, keys: TopologyKeys) -> zmq.Socket:
    """Make ``sock`` a CURVE client of the topology's servers (before connect)."""
    limit(sock)
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret
    return sock


@dataclass
class Refusals:
    """Connections turned away by one process's gatekeeper, by reason."""

    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, reason: str) -> None:
        with self.lock:
            self.counts[reason] = self.counts.get(reason, 0) + 1

    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())


class _OnlyOurClient:
    """The authenticator's rule: admit exactly the topology's client key."""

    def __init__(self, keys: TopologyKeys, refusals: Refusals) -> None:
        self.allowed = keys.client_public
        self.refusals = refusals

    def callback(self, domain: str, key: bytes) -> bool:
        # pyzmq hands the key over in Z85 text.
        if key == self.allowed:
            return True
        log.warning("refused a CURVE client with an unknown key %s", key[:8].decode(
            "ascii", "replace") + "...")
        self.refusals.add("unknown client key")
        return False


class Gatekeeper:
    """The ZAP authenticator and handshake monitor of one process's CURVE servers.

    >>> keys = TopologyKeys.generate()
    >>> with Gatekeeper(zmq.Context(), keys) as gate:
    ...     gate.refusals.total()
    0
    """

    def __init__(self, ctx: zmq.Context, keys: TopologyKeys) -> None:
        from zmq.auth.thread import ThreadAuthenticator  # not at the top: see the imports

        self.ctx = ctx
        self.refusals = Refusals()
        self.auth = ThreadAuthenticator(ctx, log=logging.getLogger(__name__ + ".zap"))
        self.auth.start()
        self.auth.configure_curve_callback(
            domain=ZAP_DOMAIN, credentials_provider=_OnlyOurClient(keys, self.refusals))
        self._monitors: list[threading.Thread] = []
        self._stopping = threading.Event()

    def watch(self, sock: zmq.Socket, name: str) -> None:
        """Log and count failed handshakes on ``sock`` (a NULL client, a wrong server key:
        the authenticator never hears of those)."""
        monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        thread = threading.Thread(target=self._watch, args=(monitor, name),
                                  name=f"gatekeeper-{name}", daemon=True)
        thread.start()
        self._monitors.append(thread)

    def _watch(self, monitor: zmq.Socket, name: str) -> None:
        from zmq.utils.monitor import recv_monitor_message  # not at the top: see the imports

        poller = zmq.Poller()
        poller.register(monitor, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                if not poller.poll(100):
                    continue
                event = recv_monitor_message(monitor)
                reason = _REFUSALS.get(event["event"])
                if reason is None:
                    continue
                if event["event"] != zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    # Auth refusals were counted (with the key) by the callback.
                    self.refusals.add(reason)
                log.warning("%s: refused a connection from %s: %s", name,
                            event.get("endpoint", b"?").decode("ascii", "replace"), reason)
        except zmq.ZMQError:
            pass  # the socket or context is closing
        finally:
            monitor.close(linger=0)

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._monitors:
            thread.join(timeout=1.0)
        self.auth.stop()

    def __enter__(self) -> Gatekeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the seams the processes use: one call each, remote (CURVE) or local (limits only) -------

def keys_of(boot: dict) -> TopologyKeys | None:
    """The topology's keys from a process's boot, or None for a local topology."""
    data = boot.get("keys")
    return TopologyKeys.from_data(data) if data else None


def client(sock: zmq.Socket, keys: TopologyKeys | None) -> zmq.Socket:
    """Prepare a connecting socket (before connect): a CURVE client when the topology is
    remote, else only the frame-size limit."""
    return make_client(sock, keys) if keys is not None else limit(sock)


def serve(sock: zmq.Socket, keys: TopologyKeys | None, gate: Gatekeeper | None,
          name: str) -> zmq.Socket:
    """Prepare a binding socket (before bind): a CURVE server watched by ``gate`` when the
    topology is remote, else only the frame-size limit."""
    if keys is None:
        return limit(sock)
    make_server(sock, keys)
    if gate is not None:
        gate.watch(sock, name)
    return sock
