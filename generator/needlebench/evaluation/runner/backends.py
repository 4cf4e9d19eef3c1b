"""What a ``--model`` backend needs and takes, known before it loads: its packages and its ``--model_args`` keys.

lm-eval registers most of its models lazily (``MODEL_MAPPING`` in ``lm_eval/models/__init__.py``: a name and a
``module:Class`` path, imported only when the model is made), and importing a backend module imports its package
(``lm_eval/models/vllm_causallms.py`` imports ``vllm`` at its top), so a missing package or a model argument the
class does not take surfaced only after seconds, as a traceback. Here both are read from the backend's source with
:mod:`ast`, without importing it:

* **Packages.** The module's top-level imports (and those of the ``lm_eval.models`` modules it imports), and the
  packages its ``__init__`` checks with ``find_spec`` (``TemplateAPI`` in ``lm_eval/models/api_models.py``); a
  missing one is named with the install command (the needlebench extra that pulls in lm-eval's extra for it, read
  from both packages' metadata).
* **Model args.** lm-eval passes ``--model_args`` as keywords to the class (``LM.create_from_arg_string`` in
  ``lm_eval/api/model.py``). The keys taken are the named parameters of ``__init__`` along the class and the bases
  it passes ``**kwargs`` on to. Where ``**kwargs`` go further, the receiver's keys are added when its source is
  known: vLLM's ``EngineArgs`` fields (``vllm/engine/arg_utils.py``, when vLLM is installed; ``LLM(**kwargs)``
  refuses any other), transformers' ``from_pretrained`` keywords for ``hf`` (which also takes any key of the
  model's config, so there a key is refused only when it is a slip: close to a key taken, or another backend's).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import lm_eval_seam

#: A key of another backend and the key this one takes for the same thing (the window: ``max_model_len`` is vLLM's
#: name for lm-eval's ``max_length``).
SAME_MEANING = {"max_model_len": "max_length", "max_seq_len": "max_length", "torch_dtype": "dtype"}
#: Backends whose ``**kwargs`` reach transformers' ``from_pretrained`` (HFLM's ``_create_model``), which also
#: takes any attribute of the model's config: an unknown key there is refused only when it is a slip.
FROM_PRETRAINED = "transformers"
#: Backends whose ``**kwargs`` become vLLM's engine arguments (``LLM(**kwargs)`` -> ``EngineArgs``).
ENGINE_ARGS = "vllm"


@dataclass
class Signature:
    """The ``--model_args`` keys a backend class takes: named parameters along its ``__init__`` chain, and where
    ``**kwargs`` go in the end (None: nowhere, they are ignored or passed to a class that takes no more)."""

    params: list[str] = field(default_factory=list)
    escapes: bool = False  # **kwargs go to something other than the base class's __init__
    packages: list[str] = field(default_factory=list)  # packages the class's code needs (top-level imports...)


# --------------------------------------------------------------------------------------------- reading the source


@cache
def _module_path(module: str) -> Path | None:
    """The source file of a module, found without importing it (its parent packages are imported: lm_eval's)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


@cache
def _parsed(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _top_imports(tree: ast.Module) -> dict[str, str]:
    """Name bound at the module's top -> the module it comes from (``from X import Name`` / ``import X``)."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name
    return names


def _third_party(module: str) -> str | None:
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in (lm_eval_seam.PACKAGE, "__future__"):
        return None
    return top


def _module_packages(module: str, seen: set[str] | None = None) -> list[str]:
    """Packages imported unconditionally at the top of ``module`` and of the ``lm_eval.models`` modules it imports
    (an import inside ``try`` or a function is optional there)."""
    seen = set() if seen is None else seen
    if module in seen:
        return []
    seen.add(module)
    path = _module_path(module)
    tree = _parsed(path) if path else None
    if tree is None:
        return []
    packages: list[str] = []
    for node in tree.body:
        imported = []
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = [node.module]
        for name in imported:
            if name.startswith(f"{lm_eval_seam.MODELS_PACKAGE}."):
                packages += _module_packages(name, seen)
            elif (package := _third_party(name)) and package not in packages:
                packages.append(package)
    return packages


def _find_spec_packages(function: ast.AST) -> list[str]:
    """Packages a function checks with ``find_spec("x")``, or ``[p for p in ["x", "y"] if find_spec(p) ...]``."""

    def calls_find_spec(node: ast.AST) -> bool:
        return any(
            isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "find_spec"
            for call in ast.walk(node)
        )

    def is_find_spec(node: ast.AST) -> str | None:
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "find_spec"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
        return None

    found: list[str] = []
    for node in ast.walk(function):
        # `if not find_spec("x"):` / `if find_spec("x") is None:` (a compound test is a conditional need)
        if isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and (name := is_find_spec(test.operand)):
                found.append(name)
            elif isinstance(test, ast.Compare) and (name := is_find_spec(test.left)):
                found.append(name)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) and calls_find_spec(node):
            for generator in node.generators:
                if isinstance(generator.iter, (ast.List, ast.Tuple)):
                    found += [
                        item.value
                        for item in generator.iter.elts
                        if isinstance(item, ast.Constant) and isinstance(item.value, str)
                    ]
    return found


def _init_of(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next(
        (item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"),
        None,
    )


def _init_reading(function: ast.FunctionDef) -> tuple[list[str], bool, bool]:
    """(named parameters and the keys it reads from ``**kwargs``, takes ``**kwargs``, passes them on to something
    other than ``super().__init__``)."""
    arguments = function.args
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    names = [name for name in names if name not in ("self", "cls")]
    varkw = arguments.kwarg.arg if arguments.kwarg else None
    if varkw is None:
        return names, False, False
    parents = {id(child): parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}

    def passed_on(node: ast.Name) -> bool:
        """``f(**kwargs)`` (not ``super().__init__``), ``{**kwargs}``, ``f(kwargs)`` or ``x = kwargs``; reading a
        key (``kwargs.get``, ``"k" in kwargs``) is not."""
        parent = parents.get(id(node))
        if isinstance(parent, ast.keyword) and parent.arg is None:
            call = parents.get(id(parent))
            return not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "__init__"
                and isinstance(call.func.value, ast.Call)
                and getattr(call.func.value.func, "id", None) == "super"
            )
        if isinstance(parent, ast.Dict):
            return any(key is None and value is node for key, value in zip(parent.keys, parent.values, strict=True))
        if isinstance(parent, ast.Call):
            return node in parent.args
        return isinstance(parent, (ast.Assign, ast.AnnAssign, ast.Return))

    escapes = any(isinstance(node, ast.Name) and node.id == varkw and passed_on(node) for node in ast.walk(function))
    for node in ast.walk(function):  # kwargs.pop("k") / kwargs.get("k") / "k" in kwargs: a key it reads itself
        key = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "get")
            and getattr(node.func.value, "id", None) == varkw
            and node.args
        ):
            key = node.args[0]
        elif isinstance(node, ast.Compare) and any(getattr(item, "id", None) == varkw for item in node.comparators):
            key = node.left
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value not in names:
            names.append(key.value)
    return names, True, escapes


def _class_node(module: str, name: str) -> tuple[ast.ClassDef, ast.Module] | None:
    path = _module_path(module)
    tree = _parsed(path) if path else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, tree
    return None


def _ast_chain(module: str, name: str) -> Iterator[tuple[ast.FunctionDef, str]]:
    """The ``__init__`` of ``module:name`` and of each base it inherits one from (first base, within lm_eval),
    each with its module."""
    seen = set()
    while (module, name) not in seen:
        seen.add((module, name))
        found = _class_node(module, name)
        if found is None:
            return
        node, tree = found
        init = _init_of(node)
        if init is not None:
            yield init, module
        if not node.bases or not isinstance(node.bases[0], ast.Name):
            return
        base = node.bases[0].id
        origin = _top_imports(tree).get(base)
        if origin is None:  # defined in the same module, or a builtin (object)
            if _class_node(module, base) is None:
                return
            name = base
        else:
            module, _, name = origin.partition(":")
            if not module.startswith(f"{lm_eval_seam.PACKAGE}.") or not name:
                return


def _loaded_chain(cls: type) -> Iterator[tuple[ast.FunctionDef, str]]:
    """The ``__init__`` of a loaded class and of each class of its MRO that defines one, read from their source."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(init))
        except (OSError, TypeError):
            return
        function = next(iter(ast.parse(source).body), None)
        if not isinstance(function, ast.FunctionDef):
            return
        yield function, klass.__module__


def read_signature(target: object) -> Signature | None:
    """The :class:`Signature` of a registered model: a loaded class, or a lazy ``module:Class`` path."""
    if isinstance(target, str):
        module, _, name = target.partition(":")
        chain: Iterator[tuple[ast.FunctionDef, str]] = _ast_chain(module, name)
    elif isinstance(target, type):
        module = target.__module__
        chain = _loaded_chain(target)
    else:
        return None
    signature = Signature(packages=_module_packages(module))
    read_any = False
    for function, where in chain:
        read_any = True
        names, varkw, escapes = _init_reading(function)
        signature.params += [name for name in names if name not in signature.params]
        for package in _find_spec_packages(function):
            if package not in signature.packages:
                signature.packages.append(package)
        if where != module:
            signature.packages += _module_packages(where)
        if not varkw:
            break
        if escapes:
            signature.escapes = True
            break
    signature.packages = list(dict.fromkeys(signature.packages))
    return signature if read_any else None


# --------------------------------------------------------------------------------------------- receivers of **kwargs


def _package_dir(package: str) -> Path | None:
    """A top-level package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@cache
def engine_args() -> list[str] | None:
    """The keywords vLLM's ``LLM`` takes: its ``__init__`` parameters (``vllm/entrypoints/llm.py``) and the fields of
    ``EngineArgs`` (``vllm/engine/arg_utils.py``) its ``**kwargs`` become; None when vLLM is not installed or the
    files are not readable."""
    folder = _package_dir("vllm")
    if folder is None:
        return None
    keys: list[str] = []
    for path, name in (("entrypoints/llm.py", "LLM"), ("engine/arg_utils.py", "EngineArgs")):
        tree = _parsed(folder / path)
        node = (
            next((item for item in tree.body if isinstance(item, ast.ClassDef) and item.name == name), None)
            if tree
            else None
        )
        if node is None:
            return None
        init = _init_of(node)
        if init is not None:
            keys += _init_reading(init)[0]
        keys += [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
    return list(dict.fromkeys(keys)) or None


@cache
def from_pretrained_keys() -> list[str]:
    """The keywords of transformers' ``PreTrainedModel.from_pretrained`` (``transformers/modeling_utils.py``): its
    parameters and the ``kwargs.pop("...")`` it reads."""
    folder = _package_dir("transformers")
    tree = _parsed(folder / "modeling_utils.py") if folder else None
    keys: list[str] = []
    if tree is None:
        return keys
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "from_pretrained":
            names, _, _ = _init_reading(node)
            keys += names
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in ("pop", "get")
                    and getattr(call.func.value, "id", None) == "kwargs"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                ):
                    keys.append(str(call.args[0].value))
            break
    return [key for key in dict.fromkeys(keys) if key != "pretrained_model_name_or_path"]


def _receiver(signature: Signature) -> str | None:
    """Where a backend's ``**kwargs`` end: vLLM's engine, transformers' ``from_pretrained``, or unknown."""
    packages = signature.packages
    if "vllm" in packages:
        return ENGINE_ARGS
    if "transformers" in packages:
        return FROM_PRETRAINED
    return None


# --------------------------------------------------------------------------------------------- the checks


def _registered(model: str) -> object:
    return dict(lm_eval_seam.model_registry().items()).get(model)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _extras(distribution: str) -> dict[str, list[str]]:
    """Extra -> the distributions it requires, from an installed distribution's metadata."""
    from importlib import metadata

    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return {}
    extras: dict[str, list[str]] = {}
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?[^;]*;.*extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if match:
            name, inner, extra = match.groups()
            extras.setdefault(extra, []).append(_canonical(name) + (inner or ""))
    return extras


def install_command(package: str) -> str:
    """The command that installs ``package`` for lm-eval: a needlebench extra when one pulls in the lm-eval extra
    that requires it, else lm-eval's extra, else the package itself."""
    wanted = _canonical(package)
    lm_extras = [
        extra
        for extra, names in _extras(lm_eval_seam.DISTRIBUTION).items()
        if extra != "dev" and any(_canonical(name.split("[")[0]) == wanted for name in names)
    ]
    for lm_extra in lm_extras:
        for extra, names in _extras("needlebench").items():
            for name in names:
                base, _, inner = name.partition("[")
                if base == "lm-eval" and lm_extra in inner.rstrip("]").split(","):
                    return f"pip install 'needlebench[{extra}]'"
    if lm_extras:
        return f"pip install 'lm-eval[{lm_extras[0]}]'"
    return f"pip install {package}"


def check_installed(model: str) -> None:
    """A backend whose packages are not installed is refused, naming the package and its install command."""
    signature = read_signature(_registered(model))
    if signature is None:
        return
    for package in signature.packages:
        try:
            missing = importlib.util.find_spec(package) is None  # finds the package without importing it
        except (ImportError, ValueError):
            missing = True
        if missing:
            raise NeedlebenchError(
                f"--model {model} needs the package {package!r}, which is not installed; "
                f"install it with `{install_command(package)}`"
            )


def _closest(name: str, choices: Sequence[str]) -> str | None:
    from rapidfuzz import fuzz, process

    match = process.extractOne(name, list(choices), scorer=fuzz.ratio, score_cutoff=80)
    return match[0] if match else None


def _other_backends_keys(model: str) -> dict[str, str]:
    """Key -> a backend (hf, vllm) that takes it by name, for keys given to the wrong backend."""
    owners: dict[str, str] = {}
    for other in ("vllm", "hf", "local-completions"):
        if other == model:
            continue
        signature = read_signature(_registered(other))
        for key in signature.params if signature else []:
            owners.setdefault(key, other)
    return owners


def _config_keys(model_args: Mapping[str, Any]) -> set[str]:
    """The keys of a local model's ``config.json`` (``from_pretrained`` takes any of them as an override)."""
    pretrained = model_args.get("pretrained")
    if not isinstance(pretrained, str):
        return set()
    path = Path(pretrained).expanduser() / "config.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return set(loaded) if isinstance(loaded, dict) else set()


def check_model_args(model: str, model_args: Mapping[str, Any], skip: Sequence[str] = ()) -> None:
    """A ``--model_args`` key the backend does not take is refused: the key, a did-you-mean, the keys it takes."""
    if model in skip or not model_args:
        return
    signature = read_signature(_registered(model))
    if signature is None:
        return
    taken = list(signature.params)
    receiver = _receiver(signature) if signature.escapes else None
    extra: list[str] = []
    if receiver == ENGINE_ARGS:
        extra = engine_args() or []
    elif receiver == FROM_PRETRAINED:
        extra = from_pretrained_keys()
    closed = not signature.escapes or (receiver == ENGINE_ARGS and bool(extra))
    for key in model_args:
        if key in taken or key in extra:
            continue
        suggestion = SAME_MEANING.get(key) if SAME_MEANING.get(key) in taken else None
        suggestion = suggestion or _closest(key, [*taken, *extra])
        owner = _other_backends_keys(model).get(key)
        if not closed and (key in _config_keys(model_args) or (suggestion is None and owner is None)):
            continue  # passed on to a receiver whose keys are not all known (a model config's attributes)
        whose = f" (a {owner} key)" if owner else ""
        hint = f"did you mean {suggestion}? " if suggestion else ""
        also = {ENGINE_ARGS: " and vLLM's engine arguments", FROM_PRETRAINED: " and transformers' from_pretrained"}
        raise NeedlebenchError(
            f"--model_args key {key!r} is not taken by --model {model}{whose}; {hint}"
            f"{model} takes: {', '.join(taken)}{also.get(receiver or '', '')}"
        )


#: Backends that read a model folder the way transformers does (``gguf_file=`` names a GGUF inside it).
TRANSFORMERS_BACKENDS = ("hf", "hf-auto", "huggingface", "steered", "hf-multimodal")


def check_model_folder(model: str, model_args: Mapping[str, Any]) -> None:
    """A local model folder that holds GGUF files but no ``config.json`` needs ``gguf_file=`` (transformers says
    only "Unrecognized model" after loading); a ``gguf_file`` that is not in the folder is refused too."""
    pretrained = model_args.get("pretrained")
    if not isinstance(pretrained, str) or not pretrained:
        return
    folder = Path(pretrained).expanduser()
    if not folder.is_dir():
        return
    try:
        ggufs = sorted(item.name for item in folder.iterdir() if item.suffix == ".gguf" and item.is_file())
    except OSError:
        return
    gguf_file = model_args.get("gguf_file")
    listing = ", ".join(ggufs[:8]) + (", ..." if len(ggufs) > 8 else "")
    if model in TRANSFORMERS_BACKENDS:
        if gguf_file:
            if not (folder / str(gguf_file)).is_file():
                where = f"the GGUF files there: {listing}" if ggufs else "it holds no .gguf file"
                raise NeedlebenchError(f"--model_args gguf_file={gguf_file} is not in {pretrained}; {where}")
            return
        if ggufs and not (folder / "config.json").is_file():
            raise NeedlebenchError(
                f"--model_args pretrained={pretrained} holds no config.json, only GGUF files ({listing}); "
                f"name one with gguf_file={ggufs[0]} in --model_args"
            )
    elif model in ("vllm", "vllm-vlm") and ggufs and not (folder / "config.json").is_file():
        raise NeedlebenchError(
            f"--model_args pretrained={pretrained} holds no config.json, only GGUF files ({listing}); vLLM reads a "
            f"GGUF by its path: pretrained={folder / ggufs[0]},tokenizer=<the original model>"
        )


def late_error(error: BaseException, model: str, model_args: Mapping[str, Any]) -> str | None:
    """The one-line message for a user's mistake that only the backend found while it loaded (a key passed on to
    a receiver whose keys are not all known, a package imported lazily), None for anything else."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        package = error.name.split(".")[0]
        if importlib.util.find_spec(package) is None:
            return (
                f"--model {model} needs the package {package!r}, which is not installed; "
                f"install it with `{install_command(package)}`"
            )
    if isinstance(error, TypeError):
        match = re.search(r"unexpected keyword argument '([^']+)'", str(error))
        if match and match.group(1) in model_args:
            return f"--model_args key {match.group(1)!r} is not taken by --model {model} (its model refused it)"
    return None
