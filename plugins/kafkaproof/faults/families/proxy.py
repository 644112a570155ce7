"""Proxy faults: one rule, whose id is the fault id, installed over the control socket of the fault proxy in
front of every broker the target resolves to (docs/proxy.md); healing removes it and reads how often it
fired. The proxy's own rule parser has the last word on a rule's parameters."""
from __future__ import annotations

import contextlib
import re

from ...cluster.heal import remove_proxy_rules
from ...errors import FaultError
from ...spec.fault_families import PROXY
from ...spec.faults import FaultSpec, proxy_rule
from .base import FaultHandler, Injection


class ProxyHandler(FaultHandler):
    family = PROXY

    def check(self, spec: FaultSpec, where: str) -> None:
        """The proxy's own rule parser has the last word (value ranges, error names, combinations)."""
        from ...proxy.errors import RuleError
        from ...proxy.rules import parse_rule
        try:
            parse_rule(proxy_rule(spec))
        except RuleError as e:
            message = str(e)
            names = [n for n in re.findall(r"'(\w+)'", message) if n in PROXY.kinds[spec.kind]]
            field_ = f"params.{names[0]}" if names else "params"
            raise FaultError(f"{where}.{field_}: {message}") from None

    def require(self, cluster, spec: FaultSpec) -> None:
        if not cluster.has_proxy:
            raise FaultError(f"proxy fault {spec.kind!r} needs the fault proxy: start the cluster with "
                             f"`kafkaproof cluster up --proxy` (scenarios: cluster.proxy: true)")

    def nodes(self, injector, spec: FaultSpec) -> list[int]:
        return injector.resolve_proxied(spec.target)

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        rule = proxy_rule(spec, fault_id)
        added: list[list] = []
        try:
            for n in nodes:
                client = injector.cluster.proxy_control(n)
                try:
                    client.add_rule(rule)
                finally:
                    client.close()
                added.append([n, fault_id])
        except Exception as e:
            with contextlib.suppress(Exception):
                remove_proxy_rules(injector.cluster, added)
            raise FaultError(f"{spec.kind} on {spec.target}: the proxy refused the rule: {e}") from e
        return Injection({"proxy_rules": added}, rule=rule)
