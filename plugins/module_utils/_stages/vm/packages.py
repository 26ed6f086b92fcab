# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``packages`` (only when the definition declares packages): install them through the guest agent.

Every command is a fixed argument array, passed to ``agent/exec`` as the positional parameters of the one fixed
exec-marker wrapper (``_stage.EXEC_WRAPPER``, a POSIX ``/bin/sh`` script that never interpolates them).

1. ``dpkg-query --showformat=<fmt> -W -- name...`` (read-only) decides what is missing; when every
   package is installed in the declared version (or any version when none is declared) the stage
   sends nothing (``request`` is ``None``).
2. ``apt-get update`` (refreshes package lists; harmless to repeat) runs before the install
   because Debian cloud images boot with empty lists.
3. The install, ``/usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
   --no-install-recommends -- name[=version]...``, is the stage's one request: dispatched
   durably, its PID journaled with the submission, then polled.
4. ``dpkg-query`` verifies each package and version.

Every command runs through the runner's guest-exec helper (``StageContext.guest_exec``) and the exec-marker
wrapper (``_stage.EXEC_WRAPPER``, docs/stages.md "Guest commands"): a started marker naming its file in the guest
is journaled, then its PID, before ``exec-status`` is polled. The install is the stage's request (dispatched by
the runner, wrapped with a marker unique to the operation and the dispatch attempt, its PID journaled with the
submission); the helper resumes it by that PID. An install whose reply was lost or ambiguous (a 500 such as
``guest-exec failed - got timeout``) is resolved by its marker: started -> its exit code is awaited through the
marker files, then ``dpkg-query`` verifies; never started (and a late start refused) -> the stage is pending and
the install is sent once more; unreadable -> ``dpkg-query`` decides (all installed -> applied), else the stage
stays ``uncertain``. ``apt-get update`` and the install are new writes: the gates (and the catalog, when given)
are checked before each.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._core.errors import ProviderError
from ..guest_exec import exec_marker_path, exec_marker_state, marker_of_argv, wrap_guest_argv
from ..protocol import StageContext, StageLogic
from ..outcomes import GuestCommand, GuestOutcome, Request, Resolution, StageError, StageInProgress, wall_clock
from .. import guest as _guest

DEFAULT_PACKAGES_TIMEOUT = 900.0
DPKG_FORMAT = "${Package}\\t${db:Status-Abbrev}\\t${Version}\\n"
APT_UPDATE = ("/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-q")
# Repeatable (it only refreshes the package lists) but it changes the guest: the write checks run before a new exec.
APT_UPDATE_COMMAND = GuestCommand("update", "apt-get-update", APT_UPDATE, write=True)
INSTALL_PROBE_NAME = "apt-get-install"
APT_INSTALL = (
    "/usr/bin/env",
    "DEBIAN_FRONTEND=noninteractive",
    "apt-get",
    "install",
    "-y",
    "-q",
    "--no-install-recommends",
    "--",
)


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
    def _run(self, ctx: StageContext, command: GuestCommand) -> GuestOutcome:
        """A read-only or repeatable command run to its exit through the runner's guest-exec helper."""
        outcome = ctx.guest_exec(command, deadline=wall_clock() + self.packages_timeout)
        if outcome.state == "timeout":
            raise StageError(
                "A guest command did not finish within packages_timeout.",
                code="package_install_failed",
                details={"stage": ctx.kind, "command": command.name},
            )
        if outcome.state == "running":
            raise StageInProgress({"probe": command.name, "pid": outcome.pid})
        return outcome

    def _installed(self, ctx: StageContext) -> dict[str, str]:
        names = [p["name"] for p in ctx.plan["packages"]]
        outcome = self._run(ctx, GuestCommand("query", "dpkg-query", tuple(dpkg_query_argv(names))))
        if outcome.exitcode not in (0, 1):  # 1: some names matched nothing
            raise StageError(
                "dpkg-query failed in the guest.",
                code="package_install_failed",
                details={"stage": ctx.kind, "command": "dpkg-query", "exitcode": outcome.exitcode},
            )
        return parse_dpkg(outcome.out)

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
            update = self._run(ctx, APT_UPDATE_COMMAND)
            if update.exitcode != 0:
                raise StageError(
                    "apt-get update failed in the guest.",
                    code="package_install_failed",
                    details={"stage": ctx.kind, "command": "apt-get update", "exitcode": update.exitcode},
                )

    def request(self, ctx: StageContext) -> Request | None:
        missing = ctx.facts.get("missing", ctx.plan["packages"])
        if not missing:
            return None
        # The marker is unique to this dispatch (attempts counts dispatches, so a re-dispatch gets a new one).
        attempts = next(
            (int(item["attempts"]) for item in ctx.operation.get("stages", ()) if item.get("kind") == ctx.kind), 0
        )
        marker = exec_marker_path(ctx.operation["operationId"], "install", attempts + 1)
        return Request("POST", ctx.vm_path + "/agent/exec", {"command": wrap_guest_argv(marker, install_argv(missing))})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            raise StageError("The guest agent answered exec with an unexpected body.", code="unexpected_response")
        install = {"probe": INSTALL_PROBE_NAME, "pid": data["pid"], "issuedAt": round(wall_clock(), 3)}
        marker = marker_of_argv(request.params.get("command"))
        if marker is not None:
            install["file"] = marker
        return None, {"install": install}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        marker = ctx.evidence().get("install")
        if (
            isinstance(marker, dict)
            and (isinstance(marker.get("pid"), int) or isinstance(marker.get("file"), str))
            and "exitcode" not in marker
        ):
            self._await_install(ctx, marker)
        installed = self._installed(ctx)
        missing = missing_packages(ctx.plan["packages"], installed)
        if missing:
            raise StageError(
                "A declared package is not installed in the declared version.",
                code="package_version_missing",
                details={"stage": ctx.kind, "packages": [p["name"] for p in missing]},
            )
        return {"packages": {p["name"]: installed[p["name"]] for p in ctx.plan["packages"]}}

    def _await_install(self, ctx: StageContext, marker: t.Mapping[str, t.Any]) -> None:
        """Follow the install the runner dispatched (its PID journaled with the submission); it is never issued again."""
        command = GuestCommand(
            "install",
            INSTALL_PROBE_NAME,
            tuple((ctx.record.get("request") or {}).get("params", {}).get("command", ())),
            repeatable=False,
        )
        outcome = ctx.guest_exec(command, deadline=float(marker.get("issuedAt", wall_clock())) + self.packages_timeout)
        if outcome.state == "timeout":
            raise StageError(
                "The package install did not finish within packages_timeout.",
                code="package_install_failed",
                details={"stage": ctx.kind, "rule": "timeout"},
            )
        if outcome.state == "running":
            raise StageInProgress({"phase": "install", "pid": outcome.pid})
        if outcome.exitcode not in (
            0,
            None,
        ):  # None: its status was consumed before it was recorded; dpkg-query decides
            failed_version = "was not found" in outcome.err and "Version" in outcome.err
            raise StageError(
                "apt-get install failed in the guest.",
                code="package_version_missing" if failed_version else "package_install_failed",
                details={"stage": ctx.kind, "exitcode": outcome.exitcode},
            )

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        request = ctx.record.get("request") or {}
        marker = marker_of_argv((request.get("params") or {}).get("command")) if "probe" not in request else None
        if marker is not None:
            state, _code = exec_marker_state(ctx, marker)
            if state == "never":
                return Resolution.never_started()
            if state in ("running", "exited"):
                # Started: follow it through its marker files (``_await_install``), then dpkg-query verifies.
                return Resolution.applied(
                    install={
                        "probe": INSTALL_PROBE_NAME,
                        "pid": None,
                        "submissionStarted": True,
                        "issuedAt": round(wall_clock(), 3),
                        "file": marker,
                    },
                    installResolvedBy="marker",
                )
        try:
            installed = self._installed(ctx)
        except (ProviderError, StageError, StageInProgress):
            installed = {}
        if not missing_packages(ctx.plan["packages"], installed):
            return Resolution.applied(installResolvedBy="dpkg-query")
        return Resolution(
            "not_applied",
            message=(
                "The install's reply was lost and dpkg-query does not show every package yet; an install may "
                "still be running in the guest. Wait, then re-run: the stage checks with dpkg-query again."
            ),
        )
