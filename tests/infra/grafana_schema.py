"""Grafana's published dashboard types for the tests: ``@grafana/schema`` (Apache-2.0; the
TypeScript types Grafana generates from its dashboard and panel schemas and its own frontend
uses) at the last 11.6 and 12.x releases, and TypeScript's ``tsc`` (Apache-2.0) to check JSON
against them (5.9.3: JavaScript alone, no dependencies; 7 is a native binary per platform). No
Grafana runs: its server is AGPL-3.0, and ``@grafana/schema`` is one of its Apache-2.0 packages.

Owns: installing them with ``npm ci`` from the committed ``grafana-schema/package.json`` and
its lockfile (versions and integrity hashes pinned) into ``.cache/grafana-schema/<lockfile
hash>/``, once per lockfile (``install``); where each Grafana's types are (``types``); running
``tsc`` on sources a caller writes, giving its diagnostics (``typecheck``). Does not own what
the sources say (``tests/monitoring/grafana_types.py``). Needs Node.js and npm.

    python -m tests.infra.grafana_schema install   # what `make test` runs first
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.infra.kafka import REPO_ROOT, TestbedError

PACKAGE = Path(__file__).with_name("grafana-schema")
CACHE = REPO_ROOT / ".cache" / "grafana-schema"
# The package.json names each Grafana's types "grafana-schema-<Grafana version>" (npm aliases).
ALIAS = "grafana-schema-"
GRAFANAS = sorted(
    name.removeprefix(ALIAS)
    for name in json.loads((PACKAGE / "package.json").read_text())["dependencies"]
    if name.startswith(ALIAS)
)
# tsc --pretty false: "file(line,column): error TS1234: message", then indented elaborations.
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^(\s][^(]*)\((?P<line>\d+),(?P<column>\d+)\): "
    r"error (?P<code>TS\d+): (?P<message>.*)$"
)


@dataclass(frozen=True)
class Diagnostic:
    """One of tsc's errors: where (the file's name as given, line and column from 1) and what."""

    file: str
    line: int
    column: int
    code: str
    message: str


def _folder() -> Path:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((PACKAGE / name).read_bytes())
    return CACHE / digest.hexdigest()[:16]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise TestbedError(f"Grafana's dashboard types are installed and checked with Node.js's "
                           f"{name}, which is not on PATH")  # fmt: skip
    return found


def install(log: bool = True) -> Path:
    """The installed packages' folder (its ``node_modules``), installed once per lockfile."""
    folder = _folder()
    if (folder / "node_modules" / "typescript").is_dir():
        return folder
    if log:
        print(f"installing the dashboard types of Grafana {' and '.join(GRAFANAS)} with npm",
              file=sys.stderr)  # fmt: skip
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE / name, partial / name)
    done = subprocess.run(
        [_tool("npm"), "ci", "--ignore-scripts", "--no-audit", "--no-fund",
         "--cache", str(CACHE / "npm-cache")],
        cwd=partial, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise TestbedError(f"npm ci failed in {partial}:\n{(done.stdout + done.stderr)[-3000:]}")
    partial.rename(folder)
    return folder


@dataclass(frozen=True)
class Types:
    """One Grafana's ``@grafana/schema``: the module names a source imports, each with the file
    it is (``@grafana/schema``, ``.../raw/dashboard``, ``.../common``, ``.../panel/<type>``)."""

    grafana: str
    modules: dict[str, Path]

    @property
    def panel_types(self) -> list[str]:
        prefix = "@grafana/schema/panel/"
        return sorted(m.removeprefix(prefix) for m in self.modules if m.startswith(prefix))


def types(grafana: str) -> Types:
    """Where Grafana ``grafana``'s types are: the folder of the package's ``index.d.ts``
    (``dist/esm`` in 11.6, ``dist/types`` in 12) holds the dashboard kind's, the common ones
    and each core panel's (``raw/composable/<panel>/panelcfg``)."""
    if grafana not in GRAFANAS:
        raise TestbedError(f"no types of Grafana {grafana} here (only {GRAFANAS})")
    package = install() / "node_modules" / f"{ALIAS}{grafana}"
    indexes = sorted(package.glob("dist/*/index.d.ts"))
    if len(indexes) != 1:
        raise TestbedError(f"{package}: not one dist/*/index.d.ts but {indexes}")
    root = indexes[0].parent
    modules = {"@grafana/schema": indexes[0]}
    for name, pattern in (("raw/dashboard", "raw/dashboard/x/*types.gen.d.ts"),
                          ("common", "common/common.gen.d.ts")):  # fmt: skip
        found = sorted(root.glob(pattern))
        if len(found) != 1:
            raise TestbedError(f"{root}: not one {pattern} but {found}")
        modules[f"@grafana/schema/{name}"] = found[0]
    for path in sorted(root.glob("raw/composable/*/panelcfg/x/*types.gen.d.ts")):
        panel = path.parents[2].name
        if panel.isidentifier():  # 11.6 has "logs(new)" beside "logsnew"
            modules[f"@grafana/schema/panel/{panel}"] = path
    return Types(grafana, modules)


def typecheck(workdir: Path, sources: dict[str, str], schema: Types) -> list[Diagnostic]:
    """``tsc`` (strict, no output) on ``sources`` (file name to text) written into ``workdir``,
    their imports resolving to ``schema``'s files: its errors."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (workdir / name).write_text(text)
    (workdir / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {
            "strict": True, "noEmit": True, "skipLibCheck": True, "types": [],
            "target": "es2022", "module": "esnext", "moduleResolution": "bundler",
            "paths": {name: [str(path)] for name, path in schema.modules.items()},
        },
        "files": sorted(sources),
    }, indent=2))  # fmt: skip
    tsc = install() / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run(
        [_tool("node"), str(tsc), "-p", str(workdir), "--pretty", "false"],
        cwd=workdir, capture_output=True, text=True, check=False,
    )  # fmt: skip
    found: list[Diagnostic] = []
    for line in done.stdout.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match:
            found.append(Diagnostic(match["file"], int(match["line"]), int(match["column"]),
                                    match["code"], match["message"]))  # fmt: skip
        elif line.startswith("  ") and found:  # the error's elaboration, one line a step
            last = found.pop()
            found.append(Diagnostic(last.file, last.line, last.column, last.code,
                                    f"{last.message} / {line.strip()}"))  # fmt: skip
    if done.returncode != 0 and not found:
        raise TestbedError(f"tsc failed in {workdir}:\n{(done.stdout + done.stderr)[-3000:]}")
    return found


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print("usage: python -m tests.infra.grafana_schema install", file=sys.stderr)
        sys.exit(2)
    try:
        print(install())
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
