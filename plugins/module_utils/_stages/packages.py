# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``packages`` (only when the definition declares packages): install them through the guest agent.

No shell is involved: every command is a fixed argument array passed to ``agent/exec``.

1. ``dpkg-query --showformat=<fmt> -W -- name...`` (read-only) decides what is missing; when every
   package is installed in the declared version (or any version when none is declared) the stage
   sends nothing (``request`` is ``None``).
2. ``apt-get update`` (refreshes package lists; harmless to repeat) runs before the install
   because Debian cloud images boot with empty lists.
3. The install, ``/usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
   --no-install-recommends -- name[=version]...``, is the stage's one request: dispatched
   durably, its PID journaled with the submission, then polled.
4. ``dpkg-query`` verifies each package and version.

Before every exec a started marker is journaled, then its PID, before ``exec-status`` is polled; an
exec whose reply was lost is never repeated. A lost install reply is never re-run: ``dpkg-query``
decides (all installed -> applied), else the stage stays ``uncertain``. ``apt-get update`` and the
install are new writes: the gates (and the catalog, when given) are checked before each.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import (
    Request,
    Resolution,
    StageContext,
    StageError,
    StageInProgress,
    StageLogic,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import _guest

DEFAULT_PACKAGES_TIMEOUT = 900.0
DPKG_FORMAT = "${Package}\\t${db:Status-Abbrev}\\t${Version}\\n"
APT_UPDATE = ("/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-q")
APT_INSTALL = ("/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends", "--")


def dpkg_query_argv(names: t.Sequence[str]) -> list[str]:
    return ["dpkg-query", "--showformat=" + DPKG_FORMAT, "-W", "--", *names]


def install_argv(packages: t.Sequence[t.Mapping[str, str]]) -> list[str]:
    items = [p["name"] + ("=" + p["version"] if p.get("version") else "") for p in packages]
    return [*APT_INSTALL, *items]


def parse_dpkg(output: str) -> dict[str, str]:
    """``{name: version}`` of fully installed packages (status ``ii``) from ``DPKG_FORMAT`` output."""
    installed: dict[str, str] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, status, version = parts
        if status.strip() == "ii" and version:
            installed[name.split(":", 1)[0]] = version
    return installed


def missing_packages(packages: t.Sequence[t.Mapping[str, str]], installed: t.Mapping[str, str]) -> list[dict[str, str]]:
    """Declared packages that are absent, or present in another version than the declared one."""
    missing: list[dict[str, str]] = []
    for package in packages:
        have = installed.get(package["name"])
        if have is None or (package.get("version") and have != package["version"]):
            missing.append(dict(package))
    return missing


class PackagesStage(StageLogic):
    kind = "packages"
    task_type = None
    final_codes = frozenset({"package_install_failed", "package_version_missing", "guest_exec_unavailable"})

    def __init__(self, packages_timeout: float = DEFAULT_PACKAGES_TIMEOUT) -> None:
        self.packages_timeout = float(packages_timeout)

    @property
    def default_timeout(self) -> float:  # type: ignore[override]
        return self.packages_timeout

    # -- helpers -----------------------------------------------------------------------------------
    def _run(self, ctx: StageContext, slot: str, probe: str, argv: t.Sequence[str]) -> dict[str, t.Any]:
        """A read-only or repeatable command run to completion (PID journaled before polling)."""
        now = _guest.wall_clock()
        budget = ctx.wait_budget
        status = _guest.run_probe(ctx, slot, probe, argv, deadline=now + self.packages_timeout, sleep=ctx.sleep,
                                  budget_end=None if budget is None else now + float(budget))
        if status.get("timeout"):
            raise StageError("A guest command did not finish within packages_timeout.", code="package_install_failed",
                             details={"stage": ctx.kind, "command": probe})
        return status

    def _installed(self, ctx: StageContext) -> dict[str, str]:
        names = [p["name"] for p in ctx.plan["packages"]]
        status = self._run(ctx, "query", "dpkg-query", dpkg_query_argv(names))
        if status["exitcode"] not in (0, 1):  # 1: some names matched nothing
            raise StageError("dpkg-query failed in the guest.", code="package_install_failed",
                             details={"stage": ctx.kind, "command": "dpkg-query", "exitcode": status["exitcode"]})
        return parse_dpkg(status["out"])

    # -- protocol ----------------------------------------------------------------------------------
    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.read_config(ctx)
        _guest.check_identity(ctx, config)
        if _guest.read_power(ctx) != "running":
            raise StageError("The target VM is not running.", details={"stage": ctx.kind, "rule": "running"})
        if ctx.check_mode:
            return  # no guest command in check mode: the preview lists every declared package
        missing = missing_packages(ctx.plan["packages"], self._installed(ctx))
        ctx.facts["missing"] = missing
        if missing:
            if not isinstance(ctx.evidence().get("update"), dict):
                ctx.require_write_allowed()  # apt-get update changes the guest: a new write (a journaled one resumes by GET)
            update = self._run(ctx, "update", "apt-get-update", APT_UPDATE)
            if update["exitcode"] != 0:
                raise StageError("apt-get update failed in the guest.", code="package_install_failed",
                                 details={"stage": ctx.kind, "command": "apt-get update", "exitcode": update["exitcode"]})

    def request(self, ctx: StageContext) -> Request | None:
        missing = ctx.facts.get("missing", ctx.plan["packages"])
        if not missing:
            return None
        return Request("POST", ctx.vm_path + "/agent/exec", {"command": install_argv(missing)})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            raise StageError("The guest agent answered exec with an unexpected body.", code="unexpected_response")
        return None, {"install": {"probe": "apt-get-install", "pid": data["pid"], "issuedAt": round(_guest.wall_clock(), 3)}}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        marker = ctx.evidence().get("install")
        if isinstance(marker, dict) and isinstance(marker.get("pid"), int) and "exitcode" not in marker:
            self._await_install(ctx, marker)
        installed = self._installed(ctx)
        missing = missing_packages(ctx.plan["packages"], installed)
        if missing:
            raise StageError("A declared package is not installed in the declared version.", code="package_version_missing",
                             details={"stage": ctx.kind, "packages": [p["name"] for p in missing]})
        return {"packages": {p["name"]: installed[p["name"]] for p in ctx.plan["packages"]}}

    def _await_install(self, ctx: StageContext, marker: dict[str, t.Any]) -> None:
        started = _guest.wall_clock()
        deadline = float(marker.get("issuedAt", started)) + self.packages_timeout
        budget = ctx.wait_budget
        sleep = ctx.sleep
        interval = 0.2
        while True:
            try:
                status = _guest.exec_status(ctx, marker["pid"])
            except ProviderError as err:
                if _guest.agent_reason(err) != "unknown_pid":
                    raise
                # Its exit status was consumed before it was recorded: dpkg-query decides below.
                _guest.record(ctx, {"install": dict(marker, exitcode=None)})
                return
            if status is not None:
                _guest.record(ctx, {"install": dict(marker, exitcode=status["exitcode"])})
                if status["exitcode"] != 0:
                    failed_version = "was not found" in status["err"] and "Version" in status["err"]
                    code = "package_version_missing" if failed_version else "package_install_failed"
                    raise StageError("apt-get install failed in the guest.", code=code,
                                     details={"stage": ctx.kind, "exitcode": status["exitcode"]})
                return
            now = _guest.wall_clock()
            if now >= deadline:
                raise StageError("The package install did not finish within packages_timeout.", code="package_install_failed",
                                 details={"stage": ctx.kind, "rule": "timeout"})
            if budget is not None and now >= started + float(budget):
                raise StageInProgress({"phase": "install", "pid": marker["pid"]})
            sleep(min(interval, deadline - now))
            interval = min(interval * 1.5, 2.0)

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        try:
            installed = self._installed(ctx)
        except (ProviderError, StageError, StageInProgress):
            installed = {}
        if not missing_packages(ctx.plan["packages"], installed):
            return Resolution.applied(installResolvedBy="dpkg-query")
        return Resolution("not_applied", message=(
            "The install's reply was lost and dpkg-query does not show every package yet; an install may "
            "still be running in the guest. Wait, then re-run: the stage checks with dpkg-query again."))
