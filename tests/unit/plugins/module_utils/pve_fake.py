# SPDX-License-Identifier: GPL-3.0-or-later
"""The unit tests' one fake Proxmox client: typed as ``_protocols.ApiClient``, every request validated against the PVE schema.

Import with ``from pve_fake import FakeClient, ...`` (this directory is on ``sys.path`` for the tests under it;
the tests in ``_stages`` reach it through ``stage_fakes``).

An *answer* is a value (returned as a deep copy), an exception (raised), a callable taking the request's
parameters and returning an answer, or ``in_turn(a, b, ...)`` (each call takes the next; the last repeats).
GETs are answered from ``routes`` (path -> answer; an unknown path fails the test unless ``default`` is given),
mutations from ``routes`` under ``"METHOD path"`` when present, else from ``replies`` in order.
An answer built with ``envelope(data, total=...)`` is the whole JSON envelope ``request`` returns.
"""

from __future__ import annotations

import copy
import threading
import typing as t

from pvesim.schema import Schema

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import ConnectionSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.protocols import ApiClient, ApiVerbs

Call = t.Tuple[str, str, t.Dict[str, t.Any]]
_NO_DEFAULT = object()


class in_turn:  # pylint: disable=invalid-name  # reads as a function at the call site
    """Answers given one per call, the last one repeated."""

    def __init__(self, *answers: t.Any) -> None:
        if not answers:
            raise ValueError("in_turn needs at least one answer")
        self.answers = list(answers)
        self.calls = 0

    def next(self) -> t.Any:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


class envelope(dict):  # type: ignore[type-arg]  # pylint: disable=invalid-name
    """A whole JSON envelope (``data`` plus e.g. ``total``), returned as is by ``request``."""

    def __init__(self, data: t.Any, **extra: t.Any) -> None:
        super().__init__(data=data, **extra)


def wire(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Parameters as the client encodes them (booleans as 0/1)."""
    return {
        key: (1 if value is True else 0 if value is False else value)
        for key, value in params.items()
        if value is not None
    }


def assert_valid(method: str, path: str, params: t.Mapping[str, t.Any]) -> None:
    errors = Schema.load().validate(method, path, wire(params))
    assert errors == [], (method, path, [str(error) for error in errors])


class FakeClient(ApiVerbs):
    """See the module docstring. ``log`` holds every request as (method, path, params), in order."""

    def __init__(
        self,
        routes: t.Mapping[str, t.Any] | None = None,
        replies: t.Sequence[t.Any] = (),
        *,
        user: str | None = "vmanyware@pve",
        token: str | None = "full",
        provider_scope_id: str | None = None,
        default: t.Any = _NO_DEFAULT,
    ) -> None:
        self.routes: dict[str, t.Any] = dict(routes or {})
        self.replies = list(replies)
        self.default = default
        self.log: list[Call] = []
        self._settings = ConnectionSettings(host="pve-test.invalid", user=user, token_name=token)
        self.provider_scope_id = provider_scope_id  # settable: a test may switch the provider reached
        self._lock = threading.Lock()  # some tests call from several threads

    # -- ApiClient ---------------------------------------------------------------------------------------
    @property
    def settings(self) -> ConnectionSettings:
        return self._settings

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        method = method.upper()
        sent = {key: value for key, value in (params or {}).items() if value is not None}
        with self._lock:
            self.log.append((method, path, dict(sent)))
            assert_valid(method, path, sent)
            answer = self._answer(method, path)
        answer = self._resolve(answer, sent)
        if isinstance(answer, envelope):
            return copy.deepcopy(dict(answer))
        return {"data": copy.deepcopy(answer)}

    # -- what the tests read -----------------------------------------------------------------------------
    def calls(self, method: str | None = None) -> list[Call]:
        return [call for call in self.log if method is None or call[0] == method]

    def paths(self, method: str | None = None) -> list[str]:
        return [path for _method, path, _params in self.calls(method)]

    def mutations(self) -> list[Call]:
        return [call for call in self.log if call[0] != "GET"]

    # -- internals ----------------------------------------------------------------------------------------
    def _answer(self, method: str, path: str) -> t.Any:
        key = path if method == "GET" else "%s %s" % (method, path)
        if key in self.routes:
            return self.routes[key]
        if method != "GET" and self.replies:
            return self.replies.pop(0)
        if self.default is not _NO_DEFAULT:
            return self.default
        raise AssertionError("unexpected %s %s" % (method, path))

    @staticmethod
    def _resolve(answer: t.Any, params: dict[str, t.Any]) -> t.Any:
        while True:
            if isinstance(answer, in_turn):
                answer = answer.next()
            elif callable(answer) and not isinstance(answer, type):
                answer = answer(params)
            else:
                break
        if isinstance(answer, BaseException):
            raise answer
        return answer


if t.TYPE_CHECKING:
    _CHECK: ApiClient = FakeClient()  # mypy proves the fake implements the client's Protocol
