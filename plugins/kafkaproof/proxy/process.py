"""Run the fault proxy as a subprocess and drive it through its control channel."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Sequence

from ..controlsock import read_token
from .control import ControlClient
from .errors import ControlError, ProxyError
from .server import Route, format_hostport

_PLUGINS_DIR = str(Path(__file__).resolve().parents[2])


class ProxyProcess:
    """Context manager: spawn ``python -m kafkaproof.proxy``, wait for it to be ready, always stop it.

    >>> with ProxyProcess(["1@127.0.0.1:0=127.0.0.1:9092"], events="run/proxy-events.jsonl") as proxy:
    ...     rule_id = proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1})
    ...     producer = Producer({"bootstrap.servers": proxy.bootstrap})

    ``routes`` are :class:`Route` objects or ``[NODE_ID@]HOST:PORT=UPSTREAM_HOST:PORT``
    strings. ``log_file`` receives the proxy's stderr (default: inherited). The control channel is a
    Unix socket in a private (0700) temporary directory unless ``control`` names another; a TCP
    ``control`` (``HOST:PORT``) needs ``control_token_file``, a 0600 file of the secret token
    (``kafkaproof.controlsock.write_token``).
    """

    def __init__(self, routes: Sequence[Route | str], *, events: str | os.PathLike[str] | None = None,
                 control: str | None = None, control_token_file: str | os.PathLike[str] | None = None,
                 rewrite: bool = True, advertise_host: str | None = None,
                 max_versions: dict[str, int] | None = None, rules: Sequence[dict[str, Any]] = (),
                 seed: int | None = None, log_file: str | os.PathLike[str] | None = None,
                 log_level: str = "INFO", python: str = sys.executable, startup_timeout: float = 15.0,
                 stop_timeout: float = 10.0) -> None:
        self._control_dir: str | None = None
        if control is None:
            self._control_dir = tempfile.mkdtemp(prefix="kafkaproof-proxy-")  # mode 0700
            control = f"unix:{self._control_dir}/control.sock"
        self.args = [python, "-m", "kafkaproof.proxy", "--control", control, "--log-level", log_level,
                     "--exit-with-parent"]
        self.token: str | None = None
        if control_token_file is not None:
            self.args += ["--control-token-file", str(control_token_file)]
            self.token = read_token(Path(control_token_file))
        for route in routes:
            self.args += ["--listen", _route_text(route)]
        if events is not None:
            self.args += ["--events", str(events)]
        if not rewrite:
            self.args.append("--no-rewrite")
        if advertise_host:
            self.args += ["--advertise-host", advertise_host]
        for api, version in (max_versions or {}).items():
            self.args += ["--max-version", f"{api}={version}"]
        for rule in rules:
            self.args += ["--rule", json.dumps(rule)]
        if seed is not None:
            self.args += ["--seed", str(seed)]
        self.log_file = log_file
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self._client: ControlClient | None = None
        self._log: IO[bytes] | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ProxyProcess:
        """Spawn the proxy and wait for its ready line; raises :class:`ProxyError` on failure."""
        if self._control_dir is not None:
            os.makedirs(self._control_dir, mode=0o700, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PLUGINS_DIR, env.get("PYTHONPATH")) if p)
        stderr: Any = None
        if self.log_file is not None:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_file, "ab")
            stderr = self._log
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=stderr, env=env)
        try:
            self.ready = self._read_ready()
            self._client = ControlClient(self.ready["control"], token=self.token)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_ready(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProxyError(f"proxy did not report ready within {self.startup_timeout}s: {self.args}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait(timeout=5)
                raise ProxyError(f"proxy exited with code {code} before it was ready (see its log): {self.args}")
            buf += chunk
        try:
            ready = json.loads(buf.split(b"\n", 1)[0])
        except json.JSONDecodeError as exc:
            raise ProxyError(f"proxy printed an unexpected first line {buf[:200]!r}") from exc
        if not ready.get("ready"):
            raise ProxyError(f"proxy printed an unexpected first line {buf[:200]!r}")
        return ready

    def stop(self) -> int | None:
        """Terminate the proxy (SIGTERM, then SIGKILL after ``stop_timeout``); returns its exit code."""
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
            self._client = None
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=self.stop_timeout)
            code = self.proc.returncode
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None
        return code

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- info and control

    @property
    def pid(self) -> int | None:
        """OS process id of the proxy."""
        return self.proc.pid if self.proc is not None else None

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` value that goes through the proxy."""
        return str(self.ready["bootstrap"])

    @property
    def listeners(self) -> list[dict[str, Any]]:
        """Listener descriptions from the ready line (proxy, advertised, upstream, broker)."""
        return list(self.ready["listeners"])

    @property
    def control(self) -> ControlClient:
        """The control client (raises if the proxy is not running)."""
        if self._client is None:
            raise ControlError("proxy process is not running")
        return self._client

    def add_rule(self, rule: dict[str, Any]) -> str:
        """Install a rule; returns its id."""
        return self.control.add_rule(rule)

    def remove_rule(self, rule_id: str) -> dict[str, Any] | None:
        """Uninstall a rule; returns it with its final counters, None if there was no such rule."""
        return self.control.remove_rule(rule_id)

    def clear(self) -> int:
        """Uninstall every rule."""
        return self.control.clear()

    def rules(self) -> list[dict[str, Any]]:
        """Installed rules with state and counters."""
        return self.control.rules()

    def stats(self) -> dict[str, Any]:
        """Listener counters, rules and event count."""
        return self.control.stats()


def _route_text(route: Route | str) -> str:
    if isinstance(route, str):
        return route
    prefix = f"{route.broker}@" if route.broker is not None else ""
    return f"{prefix}{format_hostport(*route.listen)}={format_hostport(*route.upstream)}"
