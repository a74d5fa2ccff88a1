"""The package's layers and their one-way dependencies.

_problems <- _algorithms, _robust <- _engine <- _theory, _stats <- repro <- cli: a module may
import from its own layer and the layers to its left, never from the right; module-level
imports form no cycle; notebooks and benchmarks use public names only.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "fedjax_abc"

# layer of each first component below fedjax_abc; the public facades sit on their layer
LAYER = {"_problems": 0, "problems": 0, "data": 0, "_algorithms": 1, "algorithms": 1, "transforms": 1,
         "_robust": 1, "robust": 1, "_decentral": 1, "decentral": 2, "_engine": 2, "timing": 2,
         "_theory": 3, "theory": 3, "_stats": 3, "stats": 3, "repro": 4, "cli": 5, "__main__": 5, "__init__": 5}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] if len(parts) > 1 else parts
    return ".".join(parts)


def _imports(path: pathlib.Path, top_level_only: bool):
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedjax_abc"):
            if node.module == "fedjax_abc":
                yield from (f"fedjax_abc.{a.name}" for a in node.names)
            else:  # a module of a package names that module (``from pkg import _mod``)
                yield from (f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                            else node.module for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("fedjax_abc"))


def _is_module(name: str) -> bool:
    """Whether a dotted name below fedjax_abc is a module or package of it."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYER["__init__"]
    return LAYER[parts[1]]


MODULES = sorted(PKG.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in MODULES:
        name = _module_name(path)
        assert _layer(name) is not None, name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path):
    name = _module_name(path)
    if name == "fedjax_abc":
        return  # the public API re-exports every layer
    for target in _imports(path, top_level_only=False):
        if target == "fedjax_abc":  # `import fedjax_abc as fa` inside a function: public API
            assert _layer(name) >= LAYER["repro"], f"{name} imports the whole package"
            continue
        assert _layer(target) <= _layer(name), f"{name} (layer {_layer(name)}) imports {target}"


def test_no_import_cycles():
    """None among module-level imports nor among those made inside functions."""
    graph = {}
    for path in MODULES:
        graph[_module_name(path)] = {t for t in _imports(path, top_level_only=False)
                                     if t != "fedjax_abc"}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [])


def test_a_circle_through_a_package_import_is_seen(tmp_path):
    # ``from fedjax_abc._engine import _memory`` imports the module _memory, not the package
    bad = tmp_path / "bad.py"
    bad.write_text("from fedjax_abc._engine import _memory, _round\n"
                   "from fedjax_abc._problems import _samplers as s\n")
    assert list(_imports(bad, True)) == ["fedjax_abc._engine._memory", "fedjax_abc._engine._round",
                                         "fedjax_abc._problems._samplers"]


def test_the_layer_test_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fedjax_abc._engine._simulate import simulate\n")
    assert list(_imports(bad, True)) == ["fedjax_abc._engine._simulate"]
    assert _layer("fedjax_abc._engine._simulate") > _layer("fedjax_abc._problems._problem")


def _private_engine_imports(path: pathlib.Path) -> list:
    """The engine's private modules (``fedjax_abc._engine._x``) a module imports."""
    return [m for m in _imports(path, False) if m.startswith("fedjax_abc._engine._")]


# the layers above the engine (theory, statistics, reproduction, command line) take the
# engine's names from ``fedjax_abc._engine`` itself; the public modules re-export them
ABOVE_THE_ENGINE = [p for p in MODULES if _layer(_module_name(p)) > LAYER["_engine"]
                    and _module_name(p) not in ("fedjax_abc", "fedjax_abc.__main__")]


@pytest.mark.parametrize("path", ABOVE_THE_ENGINE, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_above_the_engine_imports_its_private_modules(path):
    assert _private_engine_imports(path) == []


def test_the_private_engine_import_test_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from fedjax_abc._engine._result import SimResult\n")
    assert _private_engine_imports(bad) == ["fedjax_abc._engine._result"]
    good = tmp_path / "good.py"
    good.write_text("from fedjax_abc._engine import SimResult\n")
    assert _private_engine_imports(good) == []


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.py"))
                         + sorted((ROOT / "benchmarks").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_notebooks_and_benchmarks_use_public_names(path):
    for target in _imports(path, top_level_only=False):
        assert not any(part.startswith("_") for part in target.split(".")[1:]), \
            f"{path.name} imports private {target}"


def _engine_patches(path: pathlib.Path) -> list:
    """The ``monkeypatch.setattr`` calls of a test file whose target is the engine's: a name
    bound to a module of ``fedjax_abc._engine`` (imported as a module, or as an attribute of
    one), or a dotted string naming one."""
    tree = ast.parse(path.read_text())
    engine = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            engine |= {a.asname or a.name for a in node.names
                       if a.name.startswith("fedjax_abc._engine")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "fedjax_abc._engine") or (isinstance(node, ast.ImportFrom)
                                          and node.module == "fedjax_abc"):
            engine |= {a.asname or a.name for a in node.names if a.name.startswith("_")}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "setattr" and node.args):
            target = node.args[0]
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if (isinstance(root, ast.Name) and root.id in engine) or (
                    isinstance(target, ast.Constant) and isinstance(target.value, str)
                    and target.value.startswith("fedjax_abc._engine")):
                found.append(f"{path.name}:{node.lineno}")
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "tests").glob("*.py")),
                         ids=lambda p: p.name)
def test_no_test_patches_the_engine(path):
    """Tests observe the engine through its public surface (callbacks, JAX's compile log,
    documented environment variables), so that a refactoring inside it breaks none."""
    assert _engine_patches(path) == []


def test_the_patch_test_can_fail(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("from fedjax_abc._engine import _memory\n"
                   "import fedjax_abc._engine._simulate as _simulate\n"
                   "def test(monkeypatch):\n"
                   "    monkeypatch.setattr(_memory, 'available_bytes', lambda: 1)\n"
                   "    monkeypatch.setattr(_simulate.shutil, 'disk_usage', None)\n"
                   "    monkeypatch.setattr('fedjax_abc._engine._plan.X', 1)\n")
    assert _engine_patches(bad) == ["test_bad.py:4", "test_bad.py:5", "test_bad.py:6"]


# ------------------------------------------------------------------ what the import costs

_HEAVY = ("dp_accounting", "pandas", "xarray", "matplotlib", "scipy", "sklearn")
_LOADED = "import sys; {imports}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"


def _loaded(imports: str) -> list:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _LOADED.format(imports=imports, heavy=_HEAVY)],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.split()


def test_the_import_loads_only_what_a_simulation_needs():
    # privacy accounting, optimisation, tables and plots load when first used
    assert _loaded("import fedjax_abc") == []
    # the check sees a module loaded (dp_accounting brings SciPy with it)
    assert {"dp_accounting", "pandas"} <= set(_loaded("import fedjax_abc, dp_accounting, pandas"))


# ------------------------------------------------------------- no module-level mutable state

_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}


def _mutable_globals(path: pathlib.Path) -> list:
    """Module-level names bound to a mutable container (a literal or a constructor call):
    state a call could change for the next. ``__all__`` is the public list, not state."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
        mutable = isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                                     ast.SetComp)) or (
            isinstance(value, ast.Call) and getattr(value.func, "id",
                                                    getattr(value.func, "attr", None))
            in _MUTABLE_CALLS)
        if names and mutable:
            found += [f"{path.relative_to(ROOT)}: {name}" for name in names]
    return found


def test_no_module_level_mutable_state():
    # the library's layers; repro's tables of the paper's settings are constants of a script
    # (written to its JSON), not state of the library
    library = [path for path in MODULES if "repro" not in path.relative_to(PKG).parts]
    found = [hit for path in library for hit in _mutable_globals(path)]
    assert found == [], "module-level mutable containers (use a tuple or a mapping proxy): " \
        + ", ".join(found)


def test_the_mutable_state_test_can_fail():
    bad = ROOT / "tests" / "_mutable_probe.py"
    try:
        bad.write_text("CACHE = {}\nSEEN: list = []\nNAMES = (1, 2)\n__all__ = ['x']\n")
        assert _mutable_globals(bad) == ["tests/_mutable_probe.py: CACHE",
                                         "tests/_mutable_probe.py: SEEN"]
    finally:
        bad.unlink()


def test_the_package_exports_its_own_names_only():
    import fedjax_abc as fa

    own = lambda v: getattr(v, "__name__", "").startswith("fedjax_abc.")  # noqa: E731
    extra = [n for n in dir(fa) if not n.startswith("_") and n not in fa.__all__
             and not own(getattr(fa, n))]  # its own submodules (fa.cli once imported) aside
    assert extra == [] and not hasattr(fa, "jax")  # no module it imports leaks out


def _concrete_component_checks(path: pathlib.Path) -> list:
    """isinstance checks on a concrete component class (an oracle, sampler, algorithm,
    transform, model or law of local steps that is not abstract) in a module."""
    import importlib

    import fedjax_abc as fa
    from fedjax_abc._problems._local_work import AbstractLocalSteps
    from fedjax_abc._problems._models import AbstractModel

    bases = (fa.AbstractOracle, fa.AbstractSampler, fa.algorithms.AbstractAlgorithm,
             fa.transforms.AbstractTransform, AbstractModel, AbstractLocalSteps,
             fa.robust.AbstractAggregator, fa.robust.AbstractPreAggregator,
             fa.robust.AbstractAttack)
    tree = ast.parse(path.read_text())
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedjax_abc"):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                and len(node.args) == 2):
            continue
        kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        for kind in kinds:
            if isinstance(kind, ast.Name) and kind.id in imported:
                cls = getattr(importlib.import_module(imported[kind.id][0]), imported[kind.id][1])
                if isinstance(cls, type) and issubclass(cls, bases) and \
                        not cls.__name__.startswith("Abstract"):
                    found.append(f"{path.name}: isinstance(..., {kind.id})")
    return found


def test_no_module_tests_for_another_modules_component_class():
    """The package asks a component what it needs (fa.theory its closed forms: an oracle's
    variance, a sampler's moments, a model's curvature; the engine its sizes and checks):
    a user's component of its own is read the same way. A concrete class is tested for
    only in the module that defines it."""
    modules = sorted(PKG.rglob("*.py"))
    assert len(modules) > 50
    found = [hit for path in modules for hit in _concrete_component_checks(path)]
    assert found == [], found


def test_the_component_class_test_can_fail():
    bad = ROOT / "tests" / "_isinstance_probe.py"
    try:
        bad.write_text("from fedjax_abc._problems._oracles import GaussianOracle, AbstractOracle\n"
                       "def f(o):\n    return isinstance(o, (AbstractOracle, GaussianOracle))\n")
        assert _concrete_component_checks(bad) == [
            "_isinstance_probe.py: isinstance(..., GaussianOracle)"]
    finally:
        bad.unlink()


def _jit_wrappers(path: pathlib.Path) -> list:
    """The jit wrappers a module applies: ``jax.jit``, ``eqx.filter_jit`` and the like, called
    or used as decorators, by their dotted names."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("jit", "filter_jit", "pmap"):
            found.append(f"{path.name}: {ast.unparse(node)}")
    return found


def test_the_engine_compiles_under_one_jit_wrapper():
    """Every compiled program of the engine goes through ``_jit.flat_jit``: one place says
    what is traced and what keys the compilation."""
    engine = sorted((PKG / "_engine").glob("*.py"))
    found = [hit for path in engine if path.name != "_jit.py" for hit in _jit_wrappers(path)]
    assert found == [], found
    assert _jit_wrappers(PKG / "_engine" / "_jit.py") == ["_jit.py: jax.jit"]


def test_the_jit_wrapper_test_can_fail(tmp_path):
    bad = tmp_path / "_probe.py"
    bad.write_text("import equinox as eqx\n@eqx.filter_jit\ndef f(x):\n    return x\n")
    assert _jit_wrappers(bad) == ["_probe.py: eqx.filter_jit"]


# an engine function takes at most this many positional parameters (self and cls aside):
# more travel together as one of the run's records (Parts, Program, Plan, ...)
_MAX_POSITIONAL = 8


def _long_signatures(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            names = [a.arg for a in node.args.posonlyargs + node.args.args]
            names = names[1:] if names[:1] in (["self"], ["cls"]) else names
            if len(names) > _MAX_POSITIONAL:
                found.append(f"{path.name}: {getattr(node, 'name', 'lambda')} ({len(names)})")
    return found


def test_no_engine_function_takes_more_than_eight_positional_parameters():
    engine = sorted((PKG / "_engine").glob("*.py"))
    assert [hit for path in engine for hit in _long_signatures(path)] == []


def test_the_signature_test_can_fail(tmp_path):
    bad = tmp_path / "_probe.py"
    bad.write_text("def kernel(a, b, c, d, e, f, g, h, i, *, j=0):\n    return a\n"
                   "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        return a\n")
    assert _long_signatures(bad) == ["_probe.py: kernel (9)"]


# ------------------------------------------------ declared attributes, not probes

# The package asks a component for what its class declares (an abstract method or variable,
# or an isinstance test against the class that declares it), never whether the object
# happens to have an attribute. hasattr(obj, ...) and getattr(obj, "name", default) remain
# for objects that are not components; each is listed here as (file below fedjax_abc/, the
# attribute probed), with why.
PROBES_ALLOWED = frozenset({
    # functions, code objects and classes: the checks of a user's code, digests, names
    ("_problems/_checks.py", "__module__"),
    ("_problems/_checks.py", "__code__"),
    ("_problems/_checks.py", "co_names"),
    ("_problems/_checks.py", "__globals__"),
    ("_problems/_checks.py", "__qualname__"),
    ("_problems/_checks.py", "__func__"),
    ("_problems/_checks.py", "__self__"),
    ("_problems/_checks.py", "fget"),
    ("_problems/_checks.py", "__dataclass_fields__"),
    ("_problems/_problem.py", "__qualname__"),
    ("_engine/_checkpoint.py", "__func__"),
    ("_engine/_checkpoint.py", "fget"),
    ("_engine/_checkpoint.py", "__wrapped__"),
    ("cli.py", "__code__"),  # the garbage collector's callbacks
    ("_engine/_plan.py", "closed_form"),  # a gradient function's own say
    # what a user's function returns (a gradient, a loss, a model's logits, a metric) and
    # values given as data (arrays, sequences)
    ("_problems/_checks.py", "shape"),
    ("_problems/_problem.py", "shape"),
    ("_problems/_problem.py", "dtype"),
    ("_problems/_learning.py", "shape"),
    ("_problems/_learning.py", "__len__"),
    ("_problems/_paper.py", "__len__"),
    ("_problems/_data.py", "__iter__"),
    ("_engine/_metrics.py", "shape"),
    ("_engine/_metrics.py", "dtype"),
    ("_engine/_metrics.py", "kind"),
    ("_engine/_run.py", "weak_type"),  # a leaf's
    ("_engine/_result.py", "__array__"),
    ("repro/common.py", "shape"),
    ("repro/common.py", "dtype"),
    # the platform, a device, an output stream
    ("_engine/_cores.py", "sched_getaffinity"),
    ("_engine/_memory.py", "platform"),
    ("repro/common.py", "isatty"),
    # a field path a user names (a sweep's "algorithm.mu")
    ("_engine/_sweep.py", "part"),
})


def _probes(path: pathlib.Path, base: pathlib.Path = PKG) -> list:
    """(file, attribute, call) of every ``hasattr(obj, name)`` and ``getattr(obj, "name",
    default)`` of a module, in line order; the attribute is the literal's value, or the
    expression's text where it is not a literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        args = node.args
        if node.func.id == "hasattr" and len(args) == 2:
            name = args[1]
        elif node.func.id == "getattr" and len(args) == 3 and isinstance(
                args[1], ast.Constant) and isinstance(args[1].value, str):
            name = args[1]
        else:
            continue
        attr = name.value if isinstance(name, ast.Constant) else ast.unparse(name)
        found.append((node.lineno, path.relative_to(base).as_posix(), attr, ast.unparse(node)))
    return [hit[1:] for hit in sorted(found)]


def test_components_are_asked_for_declared_attributes_not_probed():
    found = [hit for path in MODULES for hit in _probes(path)]
    extra = [f"{file}: {call}" for file, attr, call in found if (file, attr) not in PROBES_ALLOWED]
    assert extra == [], "attribute probes (declare the attribute on the component's abstract " \
        "class, or test isinstance against the class that declares it): " + ", ".join(extra)
    stale = sorted(PROBES_ALLOWED - {(file, attr) for file, attr, _ in found})
    assert stale == [], f"PROBES_ALLOWED entries with no probe left (remove them): {stale}"


def test_the_probe_test_can_fail(tmp_path):
    bad = tmp_path / "_probe.py"
    bad.write_text("def f(sampler, model, obj, name):\n"
                   "    if hasattr(sampler, 'num_sampled'):\n"
                   "        return getattr(model, 'curvature', None)\n"
                   "    return getattr(obj, name, None), getattr(obj, 'shape'), obj.dim\n")
    assert _probes(bad, tmp_path) == [
        ("_probe.py", "num_sampled", "hasattr(sampler, 'num_sampled')"),
        ("_probe.py", "curvature", "getattr(model, 'curvature', None)")]


# Under ``from __future__ import annotations`` equinox reads ``eqx.AbstractVar[...]`` as a
# plain field: the class is not abstract in it, and a subclass that forgets it is not told.
# So no module declaring abstract variables postpones its annotations.


def _postponed_abstract(path: pathlib.Path) -> bool:
    """Whether a module postpones its annotations and declares an abstract variable."""
    tree = ast.parse(path.read_text())
    postponed = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                    and any(a.name == "annotations" for a in node.names) for node in tree.body)
    abstract = any(isinstance(node, ast.AnnAssign) and "Abstract" in ast.unparse(node.annotation)
                   and ("AbstractVar" in ast.unparse(node.annotation)
                        or "AbstractClassVar" in ast.unparse(node.annotation))
                   for node in ast.walk(tree))
    return postponed and abstract


def test_abstract_variables_are_declared_where_equinox_sees_them():
    assert [path.relative_to(PKG).as_posix() for path in MODULES
            if _postponed_abstract(path)] == []


def test_the_abstract_variable_test_can_fail(tmp_path):
    bad = tmp_path / "_probe.py"
    bad.write_text("from __future__ import annotations\nimport equinox as eqx\n"
                   "class A(eqx.Module):\n    flag: eqx.AbstractClassVar[bool]\n")
    assert _postponed_abstract(bad)
    bad.write_text("import equinox as eqx\nclass A(eqx.Module):\n"
                   "    flag: eqx.AbstractClassVar[bool]\n")
    assert not _postponed_abstract(bad)
