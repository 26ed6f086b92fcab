# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the RETURN documentation of the stage modules (and cleanup, the preflights) from tools/dev/return_docs.yml.

Usage: python tools/dev/gen_return_docs.py [--check]
(--check exits 1 and names the modules whose RETURN differs from the generated text; nothing is written).
The source's header says how entries, variants and ${vars} work.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import re
import string
import sys
import types
import typing as t
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tools" / "dev" / "return_docs.yml"
RETURN_BLOCK = re.compile(r'^RETURN = r"""\n(?P<body>.*?)^"""$', re.S | re.M)
WHOLE_VAR = re.compile(r"^\$\{(\w+)\}$")
WIDTH = 110  # PyYAML breaks after the first word past the width: lines stay under 160 characters


class _Flow(list):  # a sample: written on one line, as the hand-written samples were
    pass


class _FlowDict(dict):
    pass


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> t.Any:
        return super().increase_indent(flow, False)  # list items indented under their key


_Dumper.add_representer(
    _Flow, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)
)
_Dumper.add_representer(
    _FlowDict, lambda dumper, value: dumper.represent_mapping("tag:yaml.org,2002:map", value, flow_style=True)
)


@functools.lru_cache(maxsize=None)
def _registry() -> types.ModuleType:
    # The registry is data only (no collection imports): it loads by file path.
    spec = importlib.util.spec_from_file_location(
        "vmanyware_stage_registry", REPO / "plugins" / "module_utils" / "_stages" / "registry.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _registry_vars() -> dict[str, str]:
    registry = _registry()

    def kinds(family: str) -> str:
        names = ["V(%s)" % kind for kind in registry.module_stage_kinds(family)]
        return ", ".join(names[:-1]) + " or " + names[-1]

    return {"container_kinds": kinds(registry.CONTAINER), "template_kinds": kinds(registry.TEMPLATE)}


def _substitute(value: t.Any, variables: t.Mapping[str, t.Any]) -> t.Any:
    if isinstance(value, str):
        return string.Template(value).substitute(variables)
    if isinstance(value, list):
        return [_substitute(item, variables) for item in value]
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            whole = WHOLE_VAR.match(item) if isinstance(item, str) else None
            if whole:
                if whole.group(1) in variables:
                    result[key] = _flow(copy.deepcopy(variables[whole.group(1)]))
                continue  # the module has no such var: the field is left out
            result[key] = _substitute(item, variables)
        return result
    return value


def _flow(value: t.Any) -> t.Any:
    if isinstance(value, list):
        return _Flow(_flow(item) for item in value)
    if isinstance(value, dict):
        return _FlowDict((key, _flow(item)) for key, item in value.items())
    return value


def modules(source: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The source's modules, plus every VM stage module of the registry it does not list (the stage returns, its kind);
    a nested-playbook row's module keeps its own RETURN."""
    listed = dict(source["modules"])
    registry = _registry()
    for stage in registry.stages_in_order(registry.VM):
        if stage.nested_playbook:  # vmanyware_profile returns a nested run's result, documented in its own module
            continue
        listed.setdefault(
            stage.module, {"return": source["stage_returns"], "vars": {"stage_kind": "V(%s)." % stage.kind}}
        )
    return listed


def render(source: t.Mapping[str, t.Any], module: str) -> str:
    """The RETURN text (YAML, without the quotes) of ``module``."""
    spec = modules(source)[module]
    variables = dict(_registry_vars())
    variables.update(source.get("vars") or {})
    variables.update(spec.get("vars") or {})
    variables = {name: _substitute(value, {**variables, name: ""}) for name, value in variables.items()}
    document: dict[str, t.Any] = {}
    for item in spec["return"]:
        name, overrides = (item, {}) if isinstance(item, str) else next(iter(item.items()))
        entry = copy.deepcopy(source["entries"][name])
        entry.update(overrides or {})
        document[name.split("@", 1)[0]] = _substitute(entry, variables)
    for key in ("progress", "admission"):  # hand-written samples of shared entries keep one line too
        if isinstance(document.get(key, {}).get("sample"), dict):
            document[key]["sample"] = _flow(document[key]["sample"])
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, width=WIDTH, allow_unicode=True, default_flow_style=False
    )


def module_path(module: str) -> Path:
    return REPO / "plugins" / "modules" / (module + ".py")


def current(module: str) -> str:
    match = RETURN_BLOCK.search(module_path(module).read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit('%s has no RETURN = r"""...""" block' % module)
    return match.group("body")


def write(module: str, text: str) -> None:
    path = module_path(module)
    source = path.read_text(encoding="utf-8")
    path.write_text(RETURN_BLOCK.sub(lambda _m: 'RETURN = r"""\n' + text + '"""', source, count=1), encoding="utf-8")


def load_source() -> dict[str, t.Any]:
    return t.cast(dict, yaml.safe_load(SOURCE.read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    source = load_source()
    stale = []
    for module in modules(source):
        text = render(source, module)
        if current(module) != text:
            stale.append(module)
            if not args.check:
                write(module, text)
    if args.check and stale:
        sys.stderr.write("RETURN out of date in %s: run python tools/dev/gen_return_docs.py\n" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
