"""Local processes and loopback ports: a free port, waiting for a server to listen, stopping a process this
program started (by its PID, never by name), and a redis-server of its own.

Shared by the commands that start servers (`mcpcache gateway --port 0`, `mcpcache bench`), the scripts in
benchmarks/ and the tests, so that each starts and stops processes one way.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RedisCluster",
    "RedisServer",
    "accepts",
    "answers_ping",
    "free_port",
    "stop_process",
    "wait_until_listening",
]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def accepts(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port (a readiness probe, not a timing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until_listening(process: subprocess.Popen[bytes], port: int, within_s: float, what: str) -> None:
    """Poll until `process` listens on `port`; RuntimeError if it exits or does not within `within_s`."""
    deadline = time.monotonic() + within_s
    while not accepts(port):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on port {port}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on port {port} within {within_s:g} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """End a process this program started, by its PID: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server without persistence on a loopback port; `kill` and `start` again keep the port.

    Only this process's own server is ever stopped, by its PID.
    """

    def __init__(self, binary: str, port: int | None = None, *, extra: Sequence[str] = ()) -> None:
        self.binary = binary
        self.port = port if port is not None else free_port()
        self.extra = tuple(extra)
        """More command-line settings (a cluster node's, for instance)."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def version(self) -> str:
        return subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()

    def start(self, timeout_s: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"redis-server on port {self.port} is already running (pid {self.process.pid})")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--save",
                "",
                "--appendonly",
                "no",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout_s
        while not answers_ping(self.port):
            if self.process.poll() is not None:
                stderr = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {stderr.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port} within {timeout_s} s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, clients see their connections drop."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def restart(self) -> None:
        """A crash and a start on the same port: what a client sees when its server dies and comes back."""
        self.kill()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None
        self.start()


class RedisCluster:
    """A Redis Cluster of its own on loopback ports: `primaries` redis-server processes started with
    `--cluster-enabled yes`, the 16384 slots split evenly between them, and `replicas` replicas of each,
    joined by hand (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE: no redis-cli needed, so a valkey-server works
    too). A failover takes about two node timeouts; replicas may take over however long they were cut off
    (`cluster-replica-validity-factor 0`), and a primary's failure leaves the other slots served
    (`cluster-require-full-coverage no`). Only this program's own nodes are ever stopped, by their PIDs.
    """

    def __init__(
        self, binary: str, folder: Path, *, primaries: int = 3, replicas: int = 0, node_timeout_ms: int = 1000
    ) -> None:
        self.folder = folder
        self.primaries = primaries
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []
        self.bus_ports: list[int] = []
        for _ in range(primaries * (1 + replicas)):
            port, bus = free_port(), free_port()
            self.bus_ports.append(bus)
            settings = (
                *("--cluster-enabled", "yes", "--cluster-config-file", str(folder / f"nodes-{port}.conf")),
                # The bus on a free port of its own (its default, port + 10000, may be taken or out of range).
                *("--cluster-port", str(bus), "--cluster-node-timeout", str(node_timeout_ms)),
                *("--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no"),
                *("--repl-diskless-sync-delay", "0", "--dir", str(folder)),
            )
            self.nodes.append(RedisServer(binary, port, extra=settings))

    @property
    def url(self) -> str:
        """The `redis+cluster://` URL naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def __enter__(self) -> RedisCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> None:
        import redis

        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            for node in self.nodes:
                node.start()
            clients = [redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=10) for node in self.nodes]
            try:
                ids = [str(client.cluster("MYID").decode()) for client in clients]
                for index in range(self.primaries):
                    low, high = index * 16384 // self.primaries, (index + 1) * 16384 // self.primaries - 1
                    clients[index].cluster("ADDSLOTSRANGE", low, high)
                for node, bus in zip(self.nodes[1:], self.bus_ports[1:], strict=True):
                    clients[0].cluster("MEET", "127.0.0.1", node.port, bus)
                known = len(self.nodes)
                self._wait(
                    clients,
                    timeout_s,
                    "every node to know every other",
                    lambda i: int(i["cluster_known_nodes"]) == known,
                )
                for index in range(self.primaries, len(self.nodes)):
                    clients[index].cluster("REPLICATE", ids[index % self.primaries])
                self._wait(clients, timeout_s, "the cluster to be ok", lambda info: info["cluster_state"] == "ok")
                for client in clients[self.primaries :]:
                    self._wait([client], timeout_s, "a replica to be in sync", _in_sync)
            finally:
                for client in clients:
                    client.close()
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _wait(clients: Sequence[Any], timeout_s: float, what: str, done: Callable[[dict[str, str]], bool]) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            infos = [_cluster_info(client) for client in clients]
            if all(done(info) for info in infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis cluster did not settle within {timeout_s:g} s: waiting for {what}")
            time.sleep(0.05)

    def serving(self, key: str) -> list[RedisServer]:
        """The nodes serving `key`'s slot, as a running node's CLUSTER SLOTS says: the primary, then its
        replicas (an empty list while no running node knows of a primary for it)."""
        import redis
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        by_port = {node.port: node for node in self.nodes}
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            client = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5)
            try:
                ranges = client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
            except redis.exceptions.RedisError:
                continue
            finally:
                client.close()
            for low, high, *served in ranges:
                if low <= slot <= high:
                    return [by_port[int(entry[1])] for entry in served if int(entry[1]) in by_port]
            return []
        return []

    def wait_serving(self, key: str, count: int = 2, timeout_s: float = 60.0) -> list[RedisServer]:
        """`serving(key)` once it lists `count` nodes (a primary and its replica: the nodes' gossip may list
        a replica a moment after it is in sync). RuntimeError past `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(serving := self.serving(key)) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{key!r}'s slot is served by {len(serving)} nodes, not {count}")
            time.sleep(0.05)
        return serving

    def wait_served_by(self, key: str, node: RedisServer, timeout_s: float = 60.0) -> float:
        """Wait until `node` is the primary serving `key`'s slot (a failover done), as the running nodes
        agree; how long it took. RuntimeError past `timeout_s`."""
        started = time.monotonic()
        while True:
            serving = self.serving(key)
            running = [other for other in self.nodes if other.process is not None and other.process.poll() is None]
            if serving and serving[0] is node and all(self._primary_of(other, key) == node.port for other in running):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"port {node.port} did not take over {key!r}'s slot within {timeout_s:g} s")
            time.sleep(0.05)

    @staticmethod
    def _primary_of(node: RedisServer, key: str) -> int | None:
        import redis
        from redis.crc import key_slot

        if node.process is None or node.process.poll() is not None:
            return None
        slot = key_slot(key.encode())
        client = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5)
        try:
            for low, high, primary, *_ in client.execute_command("CLUSTER SLOTS"):  # type: ignore[no-untyped-call]
                if low <= slot <= high:
                    return int(primary[1])
        except redis.exceptions.RedisError:
            return None
        finally:
            client.close()
        return None

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _cluster_info(client: Any) -> dict[str, str]:
    """CLUSTER INFO as a dict, plus the replication link's status (a replica's)."""
    raw = client.cluster("INFO")
    info = {str(key): str(value) for key, value in raw.items()}
    replication = client.info("replication")
    info["role"] = str(replication.get("role", ""))
    info["master_link_status"] = str(replication.get("master_link_status", ""))
    return info


def _in_sync(info: dict[str, str]) -> bool:
    return info["role"] == "slave" and info["master_link_status"] == "up" and info["cluster_state"] == "ok"
